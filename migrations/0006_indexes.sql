-- An error frame replying to an operation.start is matched to its operation by reply_to alone,
-- among every start frame id the operation was sent under.
create index operations_start_frames on operations using gin (start_frame_ids);

-- The admin API's event filter by subject, newest first.
create index events_by_subject on events (cluster_uid, subject, received_at desc, frame_id desc);
