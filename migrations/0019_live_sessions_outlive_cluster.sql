-- A session's fleet-poll registration must outlive its cluster's row. The spec cuts a live session
-- whose cluster "is not registered" at its next ownership poll, and the poll finds such a session
-- by the registration whose cluster is gone (fleet-poll.ts, 'unregistered'). With the cascade, a
-- plane component that removed a cluster's row removed the registration with it: the poll never
-- looked at that session again, and an idle one stayed open for as long as its operator pinged.
-- The session removes its own row when its check refuses it and its connection ends; a row whose
-- object is gone is removed when the poll pokes it (ownership.ts leaveFleetPoll).
--
-- Additive for a rolling deploy: no statement depends on the cascade.
alter table live_sessions drop constraint if exists live_sessions_cluster_uid_fkey;
