-- wingsmith:no-transaction
-- An operation's history is read in the order the operator reported it (arrival, then its seq,
-- then frame id), and only its first and its latest entries (the operator writes as many as it
-- likes): with this index each end is a short index scan, forwards and backwards, and the count of
-- the rest an index-only scan, instead of reading and sorting the whole history per read.
--
-- Built CONCURRENTLY, outside a transaction, so that sessions keep writing operation events
-- during the build; IF NOT EXISTS lets a rerun (or an index built by hand) go on.
create index concurrently if not exists operation_events_in_order on operation_events (operation_id, at, seq, frame_id);
