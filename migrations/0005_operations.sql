-- Operations: imperative, long-running, able to fail; outside the resync contract (never pruned).
create table operations (
  operation_id text primary key,
  cluster_uid text not null references clusters(uid) on delete cascade,
  kind text not null,
  target text not null,
  params jsonb not null,
  deadline timestamptz not null,
  revision bigint not null,
  -- pending → sent → accepted → running → succeeded | failed | cancelled
  state text not null default 'pending',
  outcome_message text,
  -- The ids of every operation.start frame sent for it (one per session that delivered it):
  -- an error reply correlates on reply_to alone.
  start_frame_ids text[] not null default '{}',
  created_at timestamptz not null default now(),
  sent_at timestamptz,
  accepted_at timestamptz,
  concluded_at timestamptz,
  updated_at timestamptz not null default now()
);
create index operations_by_revision on operations (cluster_uid, revision);
create index operations_recent on operations (cluster_uid, created_at desc);

create table operation_events (
  operation_id text not null references operations(operation_id) on delete cascade,
  frame_id text not null,
  kind text not null,
  phase text,
  message text not null,
  at timestamptz not null default now(),
  session_id text,
  seq bigint,
  primary key (operation_id, frame_id)
);
