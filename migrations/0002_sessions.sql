-- Ownership: exactly one hub session is the writer for a cluster. The newest hello wins and bumps
-- the generation; every write a session makes is fenced by (session_id, generation) in the same
-- statement, so a displaced session writes nothing.
create table cluster_owners (
  cluster_uid text primary key references clusters(uid) on delete cascade,
  session_id text not null,
  generation bigint not null,
  claimed_at timestamptz not null default now(),
  -- The session's own view, refreshed by its ownership poll: the admin API reads it without
  -- waking the object.
  connected boolean not null default true,
  polled_at timestamptz,
  live jsonb not null default '{}'::jsonb
);

-- Desired state and operations share one per-cluster revision counter: a session asks for
-- everything above the revision it has already sent.
alter table clusters add column desired_revision bigint not null default 0;
