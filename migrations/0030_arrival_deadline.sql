-- A statement the hub stopped waiting for must not commit later. Postgres starts a statement's
-- timeout when the statement arrives, so one sent into a path that stalled (its bytes held in the
-- network, the socket up) and delivered once the path heals commits then: after the caller was
-- answered 504 and, perhaps, after the write it repeated. A token rotation so delayed replaced the
-- token the admin was shown with one nobody was, and the cluster could not connect again. A write
-- that names the time it must have arrived by calls this, and fails as cancelled (57014, as a
-- statement timeout does: nothing written) when it arrived later (src/hub/db/arrival.ts).
create or replace function wingsmith_arrived_by(deadline timestamptz) returns boolean
language plpgsql volatile as $$
begin
  if statement_timestamp() > deadline then
    raise exception 'statement arrived at % after its deadline %: its caller has stopped waiting', statement_timestamp(), deadline
      using errcode = '57014';
  end if;
  return true;
end
$$;
