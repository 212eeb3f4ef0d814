/**
 * The claim statement prepared (named) against sent unnamed, on one connection, alternating fresh
 * and resumed claims of many clusters: whether a plan cached after a few executions (Postgres's
 * generic plan) costs a resumed or a fresh claim anything, on a throwaway migrated database.
 * Usage: npx tsx bench/micro/claim-plan.ts (N=rounds, DATABASE_URL as for the tests).
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ulid } from 'ulid';
import { LOCAL_TEST_DATABASE_URL, startDevStack } from '../../scripts/lib/dev-stack';
import { claimCluster, type ClaimArgs } from '../../src/hub/db/ownership';
import type { Sql } from '../../src/hub/db/sql';
import { pgClient } from '../../scripts/lib/pg-node';
import { sqlOf } from '../baselines/postgres';
import { median } from '../lib/stats';

const N = Number(process.env.N ?? 400);

async function main(): Promise<void> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'wingsmith-micro-'));
  const stack = await startDevStack({
    databaseUrl: process.env.DATABASE_URL ?? LOCAL_TEST_DATABASE_URL,
    dataDir,
    createDatabase: `wingsmith_micro_${randomBytes(5).toString('hex')}`,
    reapStaleDatabases: 'wingsmith_micro_',
  });
  const client = pgClient(stack.databaseUrl, stack.pgWsProxy);
  await client.connect();
  const clusters: { uid: string; hash: string }[] = [];
  for (let i = 0; i < 50; i++) {
    const uid = `claimplan-${ulid()}`;
    const hash = randomBytes(32).toString('hex');
    await client.query(`insert into clusters (uid, name, token_hash, token_issued_at) values ($1, $1, decode($2, 'hex'), now())`, [uid, hash]);
    clusters.push({ uid, hash });
  }
  // Unnamed: the baselines' adapter, which drops the name. Named: the same, keeping it.
  const unnamed = sqlOf(client);
  const named: Sql = {
    query: async (text, params, name) => (await (name ? client.query({ name, text, values: params ?? [] }) : client.query(text, params ?? []))) as never,
  };
  const times: Record<string, number[]> = { 'named fresh': [], 'named resume': [], 'unnamed fresh': [], 'unnamed resume': [] };
  const held = new Map<string, { sessionId: string; generation: number }>();
  for (let i = 0; i < N; i++) {
    for (const prepared of [true, false]) {
      const c = clusters[i % clusters.length] as { uid: string; hash: string };
      const prev = i % 2 === 0 ? (held.get(c.uid) ?? null) : null;
      const args: ClaimArgs = {
        clusterUid: c.uid,
        tokenHashHex: c.hash,
        resume: prev,
        freshSessionId: ulid(),
        live: {},
        remoteAddr: '10.0.0.1',
        operatorVersion: '0.1.0',
        contention: { windowMs: 600_000, threshold: 3, quietMs: 600_000 },
        pollShard: 0,
        watermark: 0,
        ingestCommits: 0,
      };
      const t0 = performance.now();
      const r = await claimCluster(prepared ? named : unnamed, args, null);
      const ms = performance.now() - t0;
      if (r.generation === null || r.sessionId === null) throw new Error(`refused: ${r.refusal}`);
      held.set(c.uid, { sessionId: r.sessionId, generation: r.generation });
      if (i >= 20) times[`${prepared ? 'named' : 'unnamed'} ${prev ? 'resume' : 'fresh'}`]?.push(ms);
    }
  }
  for (const [k, xs] of Object.entries(times)) console.log(`${k}: n=${xs.length} median ${median(xs).toFixed(3)} ms`);
  await client.end();
  await stack.close();
}

void main();
