-- Who holds a claim, and what the claim before it was: a displacement (a claim taken from another
-- session that was still connected) is recorded by the claim statement itself, and a cluster whose
-- claim keeps changing hands is reported as contended.
alter table cluster_owners
  add column remote_addr text,
  add column operator_version text,
  -- The claim this one replaced, as it stood under the row lock (a claim statement cannot
  -- return the old row's values any other way).
  add column prev_session_id text,
  add column prev_connected boolean,
  add column prev_remote_addr text,
  add column prev_operator_version text,
  -- The contention episode in progress (null when none): started when a displacement made more
  -- than the threshold within the window; it ends once the claim has been quiet long enough.
  add column contention_since timestamptz,
  add column contention_last_at timestamptz;

create table cluster_displacements (
  id bigserial primary key,
  cluster_uid text not null references clusters(uid) on delete cascade,
  at timestamptz not null default now(),
  from_session text not null,
  from_remote_addr text,
  from_operator_version text,
  to_session text not null,
  to_remote_addr text,
  to_operator_version text
);
create index cluster_displacements_recent on cluster_displacements (cluster_uid, at desc);

-- The operator's refusals of desired state (an error frame answering a deployment.desired): the
-- last one per deployment, and how many there have been.
alter table desired_deployments
  add column last_refusal jsonb,
  add column refusals integer not null default 0;
