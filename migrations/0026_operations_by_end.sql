-- wingsmith:no-transaction
-- Operation retention (src/hub/db/history-prune.ts): an operation whose conclusion, or whose
-- deadline when it never concluded, is older than OPERATIONS_RETENTION_MS is deleted once its
-- history is gone. The pass takes the oldest first by this end time and stops after a batch, so a
-- pass with nothing due reads a few index pages instead of every operation ever concluded.
--
-- Built CONCURRENTLY while the hub serves (see 0017).
create index concurrently if not exists operations_by_end on operations ((coalesce(concluded_at, deadline)));
