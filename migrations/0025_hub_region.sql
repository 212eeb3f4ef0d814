-- The region this database serves (DESIGN decision 11: a region is a wrangler environment with its
-- own route, database and secrets). Nothing recorded it, so two regions given the same DATABASE_URL
-- by mistake served each other's clusters: a token registered in one region was welcomed through
-- the other's route, its session kept in that region's Durable Object jurisdiction (an EU cluster's
-- state leaving the EU). The first hub to reach the database claims it for its HUB_REGION; a hub
-- of another region refuses every request, naming DATABASE_URL (src/hub/db/region-claim.ts).
--
-- One row at most (the unique index on a constant). A region renamed on purpose moves its
-- database with `update hub_region set region = '<new>'` (README "Configuration").
--
-- Additive for a rolling deploy: the old code never reads it.
create table if not exists hub_region (
  region text primary key,
  claimed_at timestamptz not null default now()
);
create unique index if not exists hub_region_one_row on hub_region ((true));
