-- Placement of a cluster's session objects (issue 14): an optional Durable Object location hint,
-- validated by the admin API, and when placement last changed, so the connect route can start a
-- new object (placement is fixed when an object is created) for a session opened before it.
alter table clusters
  add column location_hint text,
  add column placement_changed_at timestamptz;
