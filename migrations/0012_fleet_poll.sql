-- The fleet poll (DESIGN decision 4): every connected session registers here at its claim and
-- leaves at its disconnect. A few poller objects each run one set-based statement per poll
-- interval over the sessions of their shard and poke only those whose claim, registration,
-- disablement, token or desired revision changed since the session last looked (or that have not
-- checked in for a sweep period: an object that died without saying so). An idle fleet costs one
-- statement per poller per interval, whatever its size.
create table live_sessions (
  session_id text primary key,
  cluster_uid text not null references clusters(uid) on delete cascade,
  poll_shard int not null,
  -- What the session last looked at: its claim's generation, its token, the desired revision.
  generation bigint not null,
  token_hash bytea not null,
  seen_revision bigint not null,
  registered_at timestamptz not null default now(),
  checked_at timestamptz not null default now()
);
create index live_sessions_by_shard on live_sessions (poll_shard);
create index live_sessions_by_cluster on live_sessions (cluster_uid);
