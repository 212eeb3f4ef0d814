-- A disable revokes the claim it finds, for good. The fleet poll, a session's own check and the
-- session fence compared only the cluster's current state (disabled_at), so an enable that came
-- within one poll interval of the disable, with the disable's poke to the live session lost,
-- erased every trace of the revocation: the session the disable cut stayed open and was sent what
-- was written while the cluster was disabled. A disable now also marks the owner row's claim
-- revoked; only a new claim (a hello, fresh or resuming, once the cluster is enabled) clears it.
--
-- Additive for a rolling deploy: the old code never reads the column, and it defaults to false.
alter table cluster_owners add column if not exists revoked boolean not null default false;
