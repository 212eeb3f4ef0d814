-- Observed state, as operators report it. Every row is keyed by cluster first. obs_session and
-- obs_seq record the frame that last wrote a row: a resync prunes rows not written since its
-- resync.begin in the same session.
create table observed_clusters (
  cluster_uid text primary key references clusters(uid) on delete cascade,
  kubernetes_version text not null,
  provider text not null,
  region text not null,
  labels jsonb not null,
  obs_session text not null,
  obs_seq bigint not null,
  updated_at timestamptz not null default now()
);

create table nodes (
  cluster_uid text not null references clusters(uid) on delete cascade,
  node_id text not null,
  name text not null,
  ready boolean not null,
  schedulable boolean not null,
  labels jsonb not null,
  taints jsonb not null,
  gpus integer not null,
  cpu_millis bigint not null,
  memory_mb bigint not null,
  obs_session text not null,
  obs_seq bigint not null,
  updated_at timestamptz not null default now(),
  primary key (cluster_uid, node_id)
);

-- GPUs: capacity only (memory_total_mb), never occupancy.
create table devices (
  cluster_uid text not null references clusters(uid) on delete cascade,
  device_id text not null,
  node_id text not null,
  vendor text not null,
  model text not null,
  memory_total_mb bigint not null,
  health text not null,
  driver_version text not null,
  obs_session text not null,
  obs_seq bigint not null,
  updated_at timestamptz not null default now(),
  primary key (cluster_uid, device_id)
);
create index devices_by_node on devices (cluster_uid, node_id);

create table observed_deployments (
  cluster_uid text not null references clusters(uid) on delete cascade,
  deployment_id text not null,
  observed_revision bigint,
  phase text not null,
  ready_replicas integer not null,
  message text not null,
  obs_session text not null,
  obs_seq bigint not null,
  updated_at timestamptz not null default now(),
  primary key (cluster_uid, deployment_id)
);

-- deployment.observed names the whole replica set each time; replicas it does not name are
-- deleted in the same statement.
create table replicas (
  cluster_uid text not null,
  deployment_id text not null,
  replica_id text not null,
  first_seen_at timestamptz not null default now(),
  primary key (cluster_uid, deployment_id, replica_id),
  foreign key (cluster_uid, deployment_id) references observed_deployments (cluster_uid, deployment_id)
    on delete cascade deferrable initially deferred
);

-- Events are history: appended, deduplicated by the frame id (a replay stores nothing twice).
create table events (
  cluster_uid text not null references clusters(uid) on delete cascade,
  frame_id text not null,
  kind text not null,
  subject text not null,
  reason text not null,
  message text not null,
  severity text not null,
  occurred_at timestamptz not null,
  received_at timestamptz not null default now(),
  session_id text not null,
  seq bigint not null,
  primary key (cluster_uid, frame_id)
);
create index events_recent on events (cluster_uid, received_at desc, frame_id desc);

-- The operator's send-queue counters (link.stats): cumulative per operator run (epoch).
create table link_stats (
  cluster_uid text primary key references clusters(uid) on delete cascade,
  epoch text not null,
  dropped_events bigint not null,
  evicted_frames bigint not null,
  replaced_frames bigint not null,
  updated_at timestamptz not null default now()
);

-- Poison frames: accepted, acknowledged, dropped, and recorded here with enough to find the sender.
create table rejections (
  id bigserial primary key,
  cluster_uid text not null references clusters(uid) on delete cascade,
  session_id text not null,
  seq bigint not null,
  frame_id text,
  type text not null,
  reason text not null,
  received_at timestamptz not null default now(),
  unique (cluster_uid, session_id, seq)
);
create index rejections_recent on rejections (cluster_uid, id desc);
