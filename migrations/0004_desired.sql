-- Desired state per cluster: this cluster's share of the replica bounds and the serving
-- configuration inline. revision comes from clusters.desired_revision; a withdrawal keeps a
-- tombstone (deleted = true) so the owning session can tell its operator.
create table desired_deployments (
  cluster_uid text not null references clusters(uid) on delete cascade,
  deployment_id text not null,
  workload_id text not null,
  revision bigint not null,
  min_replicas integer not null check (min_replicas >= 0),
  max_replicas integer not null check (max_replicas >= min_replicas),
  serving jsonb,
  deleted boolean not null default false,
  updated_at timestamptz not null default now(),
  primary key (cluster_uid, deployment_id),
  check (deleted or serving is not null)
);
create index desired_by_revision on desired_deployments (cluster_uid, revision);
