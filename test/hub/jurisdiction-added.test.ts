/**
 * A region that had no jurisdiction is given one (README, "Adding a jurisdiction to a region that
 * had none": every session gets a new object in the jurisdiction at its next connection; the old
 * objects, now outside it, never serve again and delete their storage at their next alarm, at the
 * latest RETENTION_MS after their last connection; DESIGN decision 2: "An object whose session
 * has had no connection for a retention period deletes its storage").
 *
 * Real workerd (wrangler's dev server, [env.eu]) on one persisted Durable Object directory, restarted
 * as a redeploy would: first without HUB_JURISDICTION, then with the eu jurisdiction (emulated, as
 * `npm start` does). The old objects' SQLite files are read with the sqlite3 CLI.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import WebSocket from 'ws';
import { describe, expect, it } from 'vitest';
import { startHub, type Hub } from '../e2e/support/worker';
import { desired, Peer, uniqueName } from '../support/peer-core';
import { FAST_TIMERS } from './support/hub';

const RETENTION_MS = 2_000;

async function admin(hub: Hub, method: string, p: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${hub.url}/admin${p}`, {
    method,
    headers: { authorization: `Bearer ${hub.adminToken}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
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

/** Every session object's SQLite file that still holds a session record, with what its replay buffer keeps. */
function storedSessions(persistDir: string): { file: string; meta: number; replay: string }[] {
  const doDir = path.join(persistDir, 'v3', 'do');
  if (!existsSync(doDir)) return [];
  const out: { file: string; meta: number; replay: string }[] = [];
  for (const d of readdirSync(doDir).filter((x) => x.includes('SessionObject'))) {
    for (const f of readdirSync(path.join(doDir, d)).filter((x) => x.endsWith('.sqlite'))) {
      const file = path.join(doDir, d, f);
      const q = (sql: string) => {
        try {
          return execFileSync('sqlite3', ['-readonly', file, sql], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
        } catch {
          return '';
        }
      };
      const meta = Number(q('select count(*) from meta') || '0');
      if (meta > 0) out.push({ file, meta, replay: q('select group_concat(frame, char(10)) from replay') });
    }
  }
  return out;
}

/**
 * Open a session on a hub started with `first`, leave desired state (its serving config) unacknowledged
 * in the session's replay buffer, stop, start again on the same storage with `second`, wait well past
 * RETENTION_MS, stop, and return what the session objects still keep.
 */
async function scenario(first: Record<string, string>, second: Record<string, string>) {
  const persistDir = await mkdtemp(path.join(tmpdir(), 'jurisdiction-added-'));
  const base = { ...FAST_TIMERS, RETENTION_MS: String(RETENTION_MS), HUB_JURISDICTION_EMULATION: '1' };
  try {
    let hub = await startHub({ env: 'eu', persistDir, vars: { ...base, ...first } });
    const name = uniqueName('jadd');
    const reg = await admin(hub, 'POST', '/clusters', { name });
    expect(reg.status).toBe(201);
    const put = await admin(hub, 'PUT', `/clusters/${name}/deployments/llama`, desired({ serving: { ...desired().serving, env: { SECRET_MARKER: 'eu-only-data' } } }));
    expect(put.status, JSON.stringify(put.json)).toBeLessThan(300);
    const peer = await connect(hub, reg.json.enrollment_token);
    const welcome = await peer.hello({ cluster_id: name });
    const sessionId = welcome.payload.session_id as string;
    await peer.next((f) => f.type === 'stream.end');
    const before = (await admin(hub, 'GET', `/clusters/${name}`)).json;
    peer.close();
    await peer.closed;
    await new Promise((r) => setTimeout(r, 300));
    await hub.stop();
    const stored = storedSessions(persistDir);

    hub = await startHub({ env: 'eu', persistDir, vars: { ...base, ...second } });
    const after = (await admin(hub, 'GET', `/clusters/${name}`)).json;
    // Long past the retention period (and the old object's alarm for it).
    await new Promise((r) => setTimeout(r, RETENTION_MS * 4));
    await hub.stop();
    return { sessionId, before, after, stored, left: storedSessions(persistDir) };
  } finally {
    await rm(persistDir, { recursive: true, force: true });
  }
}

describe('adding a jurisdiction to a region that had none', () => {
  it('control: without a change, a session object with no connection deletes its storage after RETENTION_MS', async () => {
    const r = await scenario({ HUB_JURISDICTION: '' }, { HUB_JURISDICTION: '' });
    expect(r.before).toMatchObject({ region: 'eu', jurisdiction: null });
    expect(r.stored.length).toBe(1);
    expect(r.stored[0]?.replay).toContain('eu-only-data');
    expect(r.left).toEqual([]);
  }, 90_000);

  it('the old objects, outside the new jurisdiction, delete their storage (session record, replay buffer with desired state) by RETENTION_MS after their last connection', async () => {
    const r = await scenario({ HUB_JURISDICTION: '' }, {});
    expect(r.before).toMatchObject({ region: 'eu', jurisdiction: null });
    expect(r.after).toMatchObject({ region: 'eu', jurisdiction: 'eu' });
    // Before the redeploy: one session object holding the desired state it sent and was never acked for.
    expect(r.stored.length).toBe(1);
    expect(r.stored[0]?.replay).toContain('eu-only-data');
    // Long after RETENTION_MS under the jurisdiction: the old object must have deleted its storage.
    expect(
      r.left.map((s) => ({ meta: s.meta, keepsDesiredState: s.replay.includes('eu-only-data') })),
      'session storage left outside the jurisdiction after the retention period',
    ).toEqual([]);
  }, 90_000);
});
