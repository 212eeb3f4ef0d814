-- Connection history for the dashboard's connect/disconnect strip. Written by a trigger on
-- cluster_owners, the table every session already writes when it claims a cluster (connected,
-- with a new generation) and when its connection ends (connected = false): no change to the
-- session object, and the history can never disagree with what the admin API reports. The
-- ownership poll rewrites cluster_owners every few seconds without changing any of the watched
-- columns, so the trigger's WHEN clause keeps it from running at all on that path.
create table connection_events (
  id bigserial primary key,
  cluster_uid text not null references clusters(uid) on delete cascade,
  at timestamptz not null default now(),
  connected boolean not null,
  session_id text not null,
  generation bigint not null
);
create index connection_events_recent on connection_events (cluster_uid, at desc, id desc);

create function record_connection_event() returns trigger language plpgsql as $$
begin
  insert into connection_events (cluster_uid, at, connected, session_id, generation)
  values (new.cluster_uid, now(), new.connected, new.session_id, new.generation);
  -- Bounded history: a flapping cluster writes a row per change, so keep a week.
  delete from connection_events where cluster_uid = new.cluster_uid and at < now() - interval '7 days';
  return null;
end
$$;

create trigger cluster_owners_connected_insert after insert on cluster_owners
  for each row execute function record_connection_event();
create trigger cluster_owners_connected_update after update on cluster_owners
  for each row
  when (old.connected is distinct from new.connected
        or old.generation is distinct from new.generation
        or old.session_id is distinct from new.session_id)
  execute function record_connection_event();
