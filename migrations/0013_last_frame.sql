-- When the owning session last applied a frame from its operator. Sessions sleep between frames
-- (their objects are evicted; the runtime answers idle pings), so the live view published at a
-- claim or a check goes stale; the ingest statement keeps this instead, at most once a second.
alter table cluster_owners add column last_frame_at timestamptz;
