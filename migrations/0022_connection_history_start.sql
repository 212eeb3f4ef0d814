-- The fleet view reads a cluster's state at its window's start (GET /admin/fleet
-- connections.connected_at_start) from the newest connection event at or before that start. The
-- trigger of 0010 deleted every event older than a week, that one included: a cluster connected
-- for more than a week kept only the connect, and its first disconnect after that deleted it, so
-- every window read it as disconnected until the disconnect, though it held the whole time.
-- Now the newest event before the cutoff is kept (the state since then), and the cutoff is a
-- minute further back: the widest window (168 hours) starts at the top of a minute.
create or replace function record_connection_event() returns trigger language plpgsql as $$
begin
  insert into connection_events (cluster_uid, at, connected, session_id, generation)
  values (new.cluster_uid, now(), new.connected, new.session_id, new.generation);
  delete from connection_events e
  where e.cluster_uid = new.cluster_uid and e.at < now() - interval '7 days 1 minute'
    and e.id <> (select k.id from connection_events k
                 where k.cluster_uid = new.cluster_uid and k.at < now() - interval '7 days 1 minute'
                 order by k.at desc, k.id desc limit 1);
  return null;
end
$$;
