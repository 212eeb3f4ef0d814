-- Which placement a session object was created under (regions review): a count bumped by every
-- change of a cluster's location hint, carried in the route key the connect route mints, so a
-- session resumes its object only while the placement it was created under is the current one.
-- It replaces the comparison of placement_changed_at with the route key's time, which a change
-- committed between a connect's lookup and its minting of the key slipped through.
--
-- A cluster whose hint has changed before starts at 1: its sessions' keys carry no generation,
-- and one of them may be on an object from before the change, so each gets one fresh session
-- (full resync) at its next connection. Clusters whose hint never changed keep their sessions.
alter table clusters add column placement_generation integer not null default 0;
update clusters set placement_generation = 1 where placement_changed_at is not null;
