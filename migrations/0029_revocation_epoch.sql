-- Which disables a claim came before. A disable bumps its cluster's revocation_epoch under the
-- cluster row's lock; a claim records the epoch it read under its share lock on that row, so a
-- claim granted before a disable always holds a lower epoch than the disable gave, and one granted
-- after the enable that follows holds the same. The disable's second statement, which marks
-- revoked the first claim its own snapshot could not see, tells them apart by that, not by the
-- cluster still being disabled: an enable committed between the two statements had left such a
-- claim unrevoked and its session open. Additive: code from before it never reads the columns (a
-- claim it makes keeps the owner row's old epoch, so a disable racing an enable may cut that
-- session once, and its next hello renews the claim).
alter table clusters add column if not exists revocation_epoch bigint not null default 0;
alter table cluster_owners add column if not exists claim_epoch bigint not null default 0;
