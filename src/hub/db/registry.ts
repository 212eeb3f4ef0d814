import type { Sql } from './sql';

/** The cluster registry: one statement per operation. Token hashes travel as hex. */
export interface ClusterRow {
  uid: string;
  name: string;
  token_issued_at: string;
  disabled_at: string | null;
  created_at: string;
}

const COLUMNS = `uid, name, token_issued_at, disabled_at, created_at`;

/** Names are DNS-label-like and lowercase, so a name can never be mistaken for a uid (a ULID). */
export const CLUSTER_NAME_RE = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

export async function createCluster(sql: Sql, uid: string, name: string, tokenHashHex: string): Promise<ClusterRow | null> {
  const { rows } = await sql.query<ClusterRow>(
    `insert into clusters (uid, name, token_hash, token_issued_at)
     values ($1, $2, decode($3, 'hex'), now())
     on conflict (name) do nothing
     returning ${COLUMNS}`,
    [uid, name, tokenHashHex],
  );
  return rows[0] ?? null;
}

/** By uid or by name (the two cannot collide: names are lowercase, uids are ULIDs). */
export async function getCluster(sql: Sql, idOrName: string): Promise<ClusterRow | null> {
  const { rows } = await sql.query<ClusterRow>(`select ${COLUMNS} from clusters where uid = $1 or name = $1`, [idOrName]);
  return rows[0] ?? null;
}

export async function listClusters(sql: Sql, after: string | null, limit: number): Promise<ClusterRow[]> {
  const { rows } = await sql.query<ClusterRow>(
    `select ${COLUMNS} from clusters where ($1::text is null or uid > $1) order by uid limit $2`,
    [after, limit],
  );
  return rows;
}

/** Rotate: the old token stops working at once; a live session notices on its next poll. */
export async function rotateToken(sql: Sql, idOrName: string, tokenHashHex: string): Promise<ClusterRow | null> {
  const { rows } = await sql.query<ClusterRow>(
    `update clusters set token_hash = decode($2, 'hex'), token_issued_at = now()
     where uid = $1 or name = $1 returning ${COLUMNS}`,
    [idOrName, tokenHashHex],
  );
  return rows[0] ?? null;
}

export async function setDisabled(sql: Sql, idOrName: string, disabled: boolean): Promise<ClusterRow | null> {
  const { rows } = await sql.query<ClusterRow>(
    `update clusters set disabled_at = case when $2 then coalesce(disabled_at, now()) else null end
     where uid = $1 or name = $1 returning ${COLUMNS}`,
    [idOrName, disabled],
  );
  return rows[0] ?? null;
}

export interface TokenLookup {
  uid: string;
  name: string;
  disabled: boolean;
}

/** The connect route's check: which cluster does this token belong to, and may it connect? */
export async function lookupToken(sql: Sql, tokenHashHex: string): Promise<TokenLookup | null> {
  const { rows } = await sql.query<TokenLookup>(
    `select uid, name, disabled_at is not null as disabled from clusters where token_hash = decode($1, 'hex')`,
    [tokenHashHex],
  );
  return rows[0] ?? null;
}
