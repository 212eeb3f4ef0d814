/**
 * DESIGN decision 2: a session object with no connection for RETENTION_MS deletes its storage.
 * Every fresh session is a new object (its route key), so anything an object keeps after its
 * session ends is kept for good, once per session: the object's SQLite must hold no table of
 * ours once retention has run, and an object whose connection never opened a session (refused
 * at its hello) must never have written any. Before, the wake counters were written again right
 * after retention deleted the storage, recreating every table with no alarm left to delete them.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import WebSocket from 'ws';
import { describe, expect, it } from 'vitest';
import { startHub, type Hub } from '../e2e/support/worker';
import { node, Peer, uniqueName } from '../support/peer-core';
import { FAST_TIMERS } from './support/hub';

const RETENTION_MS = 1_500;

async function admin(hub: Hub, method: string, p: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${hub.url}/admin${p}`, {
    method,
    headers: { authorization: `Bearer ${hub.adminToken}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

async function connect(hub: Hub, token: string): Promise<Peer> {
  const ws = new WebSocket(`${hub.wsUrl}/v1/connect`, { headers: { authorization: `Bearer ${token}` }, perMessageDeflate: false });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  return new Peer({
    send: (t) => ws.send(t),
    close: (code, reason) => ws.close(code, reason),
    onMessage: (fn) => ws.on('message', (d) => fn(String(d))),
    onClose: (fn) => ws.on('close', (code, reason) => fn({ code, reason: String(reason) })),
  });
}

/**
 * The tables of ours in every session object's SQLite file: not the runtime's (`_cf_…`), nor the
 * one Miniflare's local explorer writes each named object's name into (`__miniflare_…`, dev only).
 */
function sessionTables(persistDir: string): string[] {
  const doDir = path.join(persistDir, 'v3', 'do');
  if (!existsSync(doDir)) return [];
  const out: string[] = [];
  for (const d of readdirSync(doDir).filter((x) => x.includes('SessionObject'))) {
    for (const f of readdirSync(path.join(doDir, d)).filter((x) => x.endsWith('.sqlite'))) {
      const tables = execFileSync('sqlite3', ['-readonly', path.join(doDir, d, f), "select name from sqlite_master where type = 'table' and name not like '\\_cf\\_%' escape '\\' and name not like '\\_\\_miniflare%' escape '\\'"], {
        encoding: 'utf8',
      }).trim();
      if (tables) out.push(`${f}: ${tables.split('\n').join(',')}`);
    }
  }
  return out;
}

const vars = { ...FAST_TIMERS, RETENTION_MS: String(RETENTION_MS) };

describe('retention leaves a session object with nothing stored', () => {
  it('after its session ended and retention ran, the object holds no table; while it lived it held its session', async () => {
    const persistDir = await mkdtemp(path.join(tmpdir(), 'retention-storage-'));
    try {
      const hub = await startHub({ persistDir, vars });
      const name = uniqueName('ret');
      const reg = await admin(hub, 'POST', '/clusters', { name });
      expect(reg.status).toBe(201);
      const peer = await connect(hub, reg.json.enrollment_token);
      await peer.hello({ cluster_id: name });
      await peer.next((f) => f.type === 'stream.end');
      peer.send('node.observed', node('n1'));
      await peer.ackedThrough(1);
      peer.close();
      await peer.closed;
      await new Promise((r) => setTimeout(r, 300));
      await hub.stop();
      expect(sessionTables(persistDir).length).toBe(1);

      const again = await startHub({ persistDir, vars });
      // Long past the retention period and a wake-counter flush (1 s) after it.
      await new Promise((r) => setTimeout(r, RETENTION_MS * 4));
      await again.stop();
      expect(sessionTables(persistDir)).toEqual([]);
    } finally {
      await rm(persistDir, { recursive: true, force: true });
    }
  }, 90_000);

  it('a connection refused at its hello leaves its new object with nothing stored', async () => {
    const persistDir = await mkdtemp(path.join(tmpdir(), 'retention-storage-'));
    try {
      const hub = await startHub({ persistDir, vars });
      const name = uniqueName('ref');
      const reg = await admin(hub, 'POST', '/clusters', { name });
      const peer = await connect(hub, reg.json.enrollment_token);
      // A hello naming another cluster: an error and 4400, no session.
      peer.send('hello', { operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false, cluster_id: 'someone-else' });
      expect((await peer.closedWith(10_000)).code).toBe(4400);
      // Past the wake counters' flush (1 s) and the object's eviction.
      await new Promise((r) => setTimeout(r, 3_000));
      await hub.stop();
      expect(sessionTables(persistDir)).toEqual([]);
    } finally {
      await rm(persistDir, { recursive: true, force: true });
    }
  }, 60_000);
});
