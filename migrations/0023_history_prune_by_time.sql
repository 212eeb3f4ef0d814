-- wingsmith:no-transaction
-- History retention (src/hub/db/history-prune.ts) takes the oldest rows first, and a pass that
-- finds nothing due now reads a few index pages instead of a whole table (bench/MICRO.md, "History
-- retention's statement"). Measured on 3 million events, 1.2 million operation events:
-- - events: the BRIN (0020) gave the planner no order to stop early in, so at the default batch
--   it chose a sequential scan of events, which reads the whole table when nothing is due; and a
--   BRIN range keeps its old minimum after its rows are deleted, so once a backlog had been
--   deleted (and its pages reused) every range matched. A btree on the arrival time replaces it:
--   events are appended in time order, so each insert lands on the index's rightmost page.
-- - operation events: the pass walked every operation ever concluded (operations are never
--   deleted) and probed its reports, or read the whole table at a large batch; by their time
--   it reads only the reports past the horizon.
--
-- Built CONCURRENTLY while the hub serves (see 0017); the BRIN is dropped once the btree exists.
create index concurrently if not exists events_by_received_at on events (received_at);
-- wingsmith:step
create index concurrently if not exists operation_events_by_time on operation_events (at);
-- wingsmith:step
drop index concurrently if exists events_by_time;
