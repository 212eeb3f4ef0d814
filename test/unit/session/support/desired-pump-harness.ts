/**
 * A desired pump with a host that stands in for the session object: its frames apply their effects
 * as the send path does when they are written, and its Postgres answers are rows shaped as the
 * desired-state queries return them, consumed in order (an Error answer is thrown: Postgres away).
 */
import { hubConfig } from '../../../../src/hub/config';
import type { Sql } from '../../../../src/hub/db/sql';
import { createLogger } from '../../../../src/hub/log';
import { DesiredPump, type PumpHost } from '../../../../src/hub/session/desired-pump';
import { freshSessionMeta } from '../../../../src/hub/session/handshake';
import type { Outgoing } from '../../../../src/hub/session/outgoing';
import { applyEffect } from '../../../../src/hub/session/send-path';
import { MemoryReplayStore, newId, OutboundSequencer, type Payload } from '../../../../src/protocol';

export const cfg = hubConfig({});
const serving = { engine: 'vllm', model: 'm', image: 'img:1', args: [], env: {}, gpus_per_replica: 1, gpu_model: null, port: 8000 };
export const dep = (id: string, revision: number, max = 2): Payload<'deployment.desired'> => ({
  deployment_id: id,
  workload_id: 'w',
  revision,
  min_replicas: 1,
  max_replicas: max,
  serving,
  deleted: false,
});
/** A deployment row as the changes query returns it. */
export const row = (id: string, revision: number, max = 2) => ({ kind: 'deployment', revision: String(revision), deployment_id: id, workload_id: 'w', min_replicas: 1, max_replicas: max, serving, deleted: false, held: true });

/** A session just opened fresh at desired revision `revision`, whose sent frames apply their effects as the send path does. */
export function harness(revision: number, answers: (Record<string, unknown>[] | Error)[] = []) {
  const meta = freshSessionMeta({
    sessionId: `${newId()}.${newId()}`,
    cluster: { uid: 'c1', name: 'c1' },
    tokenHash: '00',
    routeKey: newId(),
    generation: 1,
    desiredRevision: revision,
    out: new OutboundSequencer(new MemoryReplayStore(), { frames: 100, bytes: 1 << 20 }).snapshot(),
    now: Date.now(),
  });
  const queued: Outgoing[] = [];
  /** Each frame's payload as the send path reads it: when it is written, in queue order. */
  const sent: unknown[] = [];
  const queries: { text: string; params: unknown[] }[] = [];
  let holding = 0;
  let written = 0;
  const write = () => {
    for (const o of queued.slice(written)) {
      sent.push(o.kind === 'frame' ? o.payload() : null);
      if (o.effect) applyEffect(meta, o.effect);
    }
    written = queued.length;
  };
  const sql: Sql = {
    async query<R>(text: string, params: unknown[] = []) {
      queries.push({ text, params });
      const rows = answers.shift();
      if (!rows) throw new Error(`unexpected query: ${text.slice(0, 80)}`);
      if (rows instanceof Error) throw rows;
      return { rows: rows as R[], rowCount: rows.length };
    },
  };
  /** The object the pump lives in; an eviction (`evict`) ends it and builds another on the same record. */
  let life = 0;
  const host = (mine: number): PumpHost => ({
    cfg,
    sql,
    meta: () => meta,
    connected: () => life === mine,
    queued: () => 0,
    queuedBytes: () => 0,
    claimLost: () => undefined,
    enqueue: (o) => {
      queued.push(o);
      // Written at once, as the send path does when the operator's window is open; inside a
      // batch, at its end.
      if (holding === 0) write();
      return true;
    },
    batch: (queue) => {
      holding++;
      try {
        return queue();
      } finally {
        if (--holding === 0) write();
      }
    },
    fence: () => ({ clusterUid: 'c1', sessionId: meta.sessionId, generation: 1, tokenHash: '00' }),
    lastOperationStart: () => null,
    log: () => createLogger({ component: 'test' }),
  });
  const pump = new DesiredPump(host(life), meta);
  pump.learn(revision);
  /**
   * The object evicted (or crashed) and built again: a new pump on the stored record, its memory
   * gone, its frames written. The old pump's own retries find no connection and stop.
   */
  const evict = () => new DesiredPump(host(++life), meta);
  return { meta, pump, queued, queries, sent, evict };
}
