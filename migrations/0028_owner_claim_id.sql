-- Which hello's claim the owner row holds: the fresh session id that hello named ($3 of the claim),
-- unique to it, whether the claim granted that id or resumed the session it asked for. A claim
-- whose answer was lost (its connection reset after the commit) is refused 1013, yet may have
-- committed: connected, and in the fleet poll, for a hello no connection carries. The gateway
-- then publishes it as not carried, matched by this id and nothing else, so a release that lands
-- late can never touch a later claim, which names another id. A resumed session's row could not
-- be matched before: its id and generation are what the session's next, answered claim keeps.
--
-- claim_generation is the generation that claim gave the row: the release matches it too. Code
-- from before this migration (a rolling deploy, a rollback) claims without touching either column,
-- leaving the last id in place under a newer generation: a release landing late must not take
-- that claim for its own. Additive: the old code never reads them.
alter table cluster_owners add column if not exists claim_id text;
alter table cluster_owners add column if not exists claim_generation bigint;
