/**
 * An operator that sends bad frames cannot make the hub write unbounded log output: a poison
 * frame's line quotes a label key cut to 64 characters (field-path.ts), not half a MiB of it, and
 * a flood of poison frames or of connection-level error frames is written within the session's
 * log budget (log-budget.ts: the first lines at full detail, the rest held back and summarised),
 * not one line per frame. Real workerd and Postgres; the hub's own JSON lines are read from the
 * Node process: wrangler's dev server relays the worker's console output through `console.*` here.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { LOG_BUDGET } from '../../src/hub/log-budget';
import { FAST_TIMERS, node, useHub } from './support/hub';

type Line = Record<string, unknown> & { level: string; msg: string };

// Every JSON line the hub writes, with its raw length (installed before the hub starts; put back
// after the file, as captureHubLines does: the hub project's files share one console).
const lines: { raw: string; line: Line }[] = [];
const savedConsole = { ...console };
afterAll(() => {
  Object.assign(console, savedConsole);
});
for (const k of ['log', 'info', 'warn', 'error', 'debug'] as const) {
  const orig = console[k].bind(console);
  (console as unknown as Record<string, (...a: unknown[]) => void>)[k] = (...args: unknown[]) => {
    const text = args.map(String).join(' ').replace(/\x1b\[[0-9;]*m/g, '');
    const at = text.indexOf('{"ts"');
    if (at >= 0) {
      const raw = text.slice(at, text.lastIndexOf('}') + 1);
      try {
        lines.push({ raw, line: JSON.parse(raw) as Line });
      } catch {
        lines.push({ raw, line: { level: 'unparsed', msg: raw.slice(0, 200) } });
      }
      // Keep the test output readable: the lines this file provokes are the finding.
      if (raw.length > 2_000) return orig(`[hub log line of ${raw.length} characters elided by the test]`);
    }
    orig(...args);
  };
}

// Floods of frames each refused on its own take seconds to work through on a loaded machine, and
// the peer sends nothing while it waits: FAST_TIMERS' hole limit (2.5 s) or silence limit (3 s)
// would close the link (1013, 4408) before they are all acknowledged, which is those rules
// working, not what these tests are about.
const h = useHub({ ...FAST_TIMERS, HOLE_TIMEOUT_MS: '20000', IDLE_TIMEOUT_MS: '30000' });
const linesOf = (session: string, msg: RegExp) => lines.filter((l) => l.line.session === session && msg.test(l.line.msg));

describe('hub log volume under a hostile operator', () => {
  it('a poison frame whose label key is half a MiB is logged with its reason cut, not the whole key', async () => {
    const c = await h.newCluster('rv-logs-key');
    const peer = await h.connect(c.token);
    const session = (await peer.hello({ cluster_id: c.name })).payload.session_id as string;
    await peer.next((f) => f.type === 'stream.end');
    // A label key over the 317-character limit: the validator names the field by its key.
    peer.send('node.observed', { ...node('n1'), labels: { ['k'.repeat(500_000)]: 'v' } });
    await peer.ackedThrough(1, 15_000);
    await new Promise((r) => setTimeout(r, 500));
    const poison = linesOf(session, /POISON FRAME/);
    expect(poison, 'the poison frame is logged').toHaveLength(1);
    expect(poison[0]?.line).toMatchObject({ level: 'error', seq: 1, type: 'node.observed' });
    // A log line is for a human and a log pipeline: a few KiB at most, never the frame's content.
    expect(poison[0]?.raw.length, 'characters in the poison frame line').toBeLessThan(8_192);
    peer.close();
  }, 30_000);

  it('a flood of 600 poison frames is rate-limited or summarised, not one error line per frame', async () => {
    const c = await h.newCluster('rv-logs-poison');
    const peer = await h.connect(c.token);
    const session = (await peer.hello({ cluster_id: c.name })).payload.session_id as string;
    await peer.next((f) => f.type === 'stream.end');
    const N = 600;
    for (let i = 0; i < N; i++) peer.send('node.observed', { bogus: i } as never);
    await peer.ackedThrough(N, 30_000);
    await new Promise((r) => setTimeout(r, 1_000));
    const poison = linesOf(session, /POISON/);
    expect(poison.length, 'poison lines written for 600 bad frames').toBeGreaterThan(0);
    expect(poison.length, 'poison lines written for 600 bad frames').toBeLessThanOrEqual(100);
    // Held back, and said so: a reader knows there were more than the lines show.
    expect(poison.some((l) => /held back/.test(l.line.msg))).toBe(true);
    peer.close();
    // The connection's end summarises what was held back.
    await new Promise((r) => setTimeout(r, 1_000));
    const summary = linesOf(session, /POISON.*summary/);
    expect(summary, 'one summary of the held-back poison lines').toHaveLength(1);
    expect(summary[0]?.line).toMatchObject({ level: 'error', suppressed: N - LOG_BUDGET.lines, first_seq: LOG_BUDGET.lines + 1, last_seq: N });
  }, 60_000);

  it('a flood of 200 frames Postgres refuses (a NUL in a node name) is logged within the budget, not a line or more per frame (each was logged twice, outside it: found by a review)', async () => {
    const c = await h.newCluster('rv-logs-refused');
    const peer = await h.connect(c.token);
    const session = (await peer.hello({ cluster_id: c.name })).payload.session_id as string;
    await peer.next((f) => f.type === 'stream.end');
    const N = 200;
    for (let i = 0; i < N; i++) peer.send('node.observed', { ...node(`n${i}`), name: `bad\u0000${i}` });
    await peer.ackedThrough(N, 60_000);
    await new Promise((r) => setTimeout(r, 1_000));
    const rejections = await h.sql<{ n: string }>('select count(*) as n from rejections where cluster_uid = $1', [c.uid]);
    expect(Number(rejections[0]?.n)).toBe(N);
    const loud = lines.filter(({ line }) => line.session === session && (line.level === 'error' || line.level === 'warn'));
    expect(loud.length, 'error and warn lines written for 200 refused frames').toBeLessThanOrEqual(100);
    expect(linesOf(session, /POISON FRAME: database refused it/).length).toBeGreaterThan(0);
    peer.close();
  }, 120_000);

  it('a flood of 600 connection-level error frames is rate-limited or summarised, not one warn line per frame', async () => {
    const c = await h.newCluster('rv-logs-errors');
    const peer = await h.connect(c.token);
    const session = (await peer.hello({ cluster_id: c.name })).payload.session_id as string;
    await peer.next((f) => f.type === 'stream.end');
    const N = 600;
    for (let i = 0; i < N; i++) peer.send('error', { code: 'internal', message: `x${i} `.padEnd(2_000, 'x'), retryable: false }, { seq: null });
    // A sequenced frame behind them: once it is acked every error frame before it was read.
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1, 30_000);
    await new Promise((r) => setTimeout(r, 1_000));
    const errors = linesOf(session, /connection error from operator/);
    expect(errors.length, 'lines written for 600 connection-level error frames').toBeGreaterThan(0);
    expect(errors.length, 'lines written for 600 connection-level error frames').toBeLessThanOrEqual(100);
    // Each line quotes the error's code and a cut of its message, never the whole payload.
    for (const e of errors) {
      expect(e.line.payload).toBeUndefined();
      expect(e.raw.length).toBeLessThan(1_500);
    }
    peer.close();
  }, 60_000);
});
