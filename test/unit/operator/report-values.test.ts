/**
 * Values from the application are refused with an error that names the problem. An event of a
 * kind the catalog does not have (a JavaScript caller, or a cast) threw "Cannot read properties of
 * undefined (reading 'schema')" from inside the SDK before the fix.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeClient, type TestClient } from './support/harness';
import { ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

describe('report values the catalog does not allow', () => {
  it('an event of an unknown kind is refused with a TypeError naming the type, and nothing is queued', () => {
    const t = makeClient(hub);
    clients.push(t);
    const event = { subject: 'node-a', reason: 'Boot', message: 'up', severity: 'info' as const };
    for (const kind of ['cluster', '__proto__', 'constructor']) {
      expect(() => t.client.emitEvent(kind as never, event)).toThrow(new TypeError(`unknown message type ${kind}.event`));
    }
    expect(t.client.stats.queued).toBe(0);
  });

  it('NaN, Infinity and a non-string label are refused with a TypeError naming the field', () => {
    const t = makeClient(hub);
    clients.push(t);
    const node = { node_id: 'n1', name: 'n1', ready: true, schedulable: true, labels: {}, taints: [], allocatable: { gpus: 1, cpu_millis: 1, memory_mb: 1 } };
    expect(() => t.client.reportNode({ ...node, allocatable: { ...node.allocatable, gpus: Number.NaN } })).toThrow(/allocatable\.gpus/);
    expect(() => t.client.reportNode({ ...node, allocatable: { ...node.allocatable, memory_mb: Infinity } })).toThrow(/allocatable\.memory_mb/);
    expect(() => t.client.reportNode({ ...node, labels: { a: 1 as never } })).toThrow(/labels\.a/);
    expect(() => t.client.reportNode({ ...node, name: 'x'.repeat(10_000) })).toThrow(/name/);
    expect(t.client.stats.queued).toBe(0);
  });
});
