/**
 * An operator whose cluster clock is set wrong, past year 9999. The SDK stamps every frame's
 * envelope `ts` from its clock, and an event's default `occurred_at`. It wrote toISOString's
 * "+010000-…", no RFC 3339 time: the hub refused its hello (4400) at every dial, and emitEvent
 * threw (found by a review). Both are now held to the last time RFC 3339 can name.
 */
import { describe, expect, it } from 'vitest';
import type { ClientTuning } from './support/sim-cluster';
import { E2E_CLIENT, sleep, useE2E } from './support/e2e';
import type { Timers } from '../../src/operator/timers';

const e = useE2E();

/** Real timers, a wall clock in year 10000 UTC (a cluster clock set wrong). */
function skewedTimers(): Timers {
  const skew = Date.UTC(10000, 0, 1) - Date.now();
  return {
    now: () => Date.now() + skew,
    schedule(fn, ms) {
      const t = setTimeout(fn, Math.min(Math.max(0, ms), 2 ** 31 - 1));
      return () => clearTimeout(t);
    },
  };
}

describe('the SDK with a cluster clock past year 9999', () => {
  it('its hello is welcomed and its reports reach Postgres (an envelope ts is never stored), and emitEvent with the default occurred_at does not throw', async () => {
    const reg = await e.register('clock-skew');
    const sim = e.cluster(reg.name);
    const refusals: string[] = [];
    const timers = skewedTimers();
    // What the SDK writes as an envelope ts with this clock (buildFrame: new Date(now).toISOString()).
    const written = new Date(timers.now()).toISOString();
    const proc = await sim.startOperator({
      hubUrl: e.hub.url,
      token: reg.token,
      storage: { kind: 'none' },
      tuning: { ...E2E_CLIENT, timers } as ClientTuning,
    });
    proc.client.on('refused', (r: { closeCode?: number | null; reason?: string }) => refusals.push(`${r.closeCode}: ${r.reason}`));
    let nodes: unknown[] = [];
    for (let i = 0; i < 50; i++) {
      nodes = await e.query('select node_id from nodes where cluster_uid = $1', [reg.uid]);
      if (nodes.length >= 3) break;
      await sleep(100);
    }
    let emitError: string | null = null;
    try {
      proc.client.emitEvent('node', { subject: 'n-0', reason: 'Cordoned', message: '', severity: 'info' } as never);
    } catch (err) {
      emitError = String(err);
    }
    expect({ written, welcomed: sim.tap.links.some((l) => l.welcome), nodes: nodes.length, refusals: refusals.slice(0, 1), dials: sim.tap.links.length > 1 ? 'several' : 'one', emitError }).toEqual({
      written,
      welcomed: true,
      nodes: 3,
      refusals: [],
      dials: 'one',
      emitError: null,
    });
  }, 30_000);
});
