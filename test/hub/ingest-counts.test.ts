/**
 * What this file proves: every count the protocol allows (up to 2^53 − 1) is stored as state and
 * read back by the admin API as a JSON number.
 *
 * Before: nodes.gpus was an `integer` column written through an int cast, so a valid
 * allocatable.gpus above 2^31 − 1 was refused by the database (22003, permanent) and the frame
 * dropped as poison. Migration 0016 widens it to bigint; the admin read converts the driver's
 * string back to a number.
 *
 * MESSAGES "Conventions": "Counts are non-negative integers no larger than 2^53 − 1", and
 * node.observed.allocatable is `{gpus, cpu_millis, memory_mb}` counts. Spec "Poison frames": only
 * "a frame that can never be applied ... a malformed id, a payload that violates a stated
 * invariant" may be dropped. A frame inside the contract is state and must be stored.
 */
import { describe, expect, it } from 'vitest';
import { device, node, useHub } from './support/hub';

const h = useHub();

describe('counts inside the contract are stored', () => {
  it('a node whose allocatable.gpus is above 2^31 − 1 (a valid count) is stored, not rejected', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const n = node('n-big');
    peer.send('node.observed', { ...n, allocatable: { ...n.allocatable, gpus: 2 ** 31 } });
    await peer.ackedThrough(1, 8_000);
    expect(await h.sql('select seq, reason from rejections where cluster_uid = $1', [c.uid])).toEqual([]);
    expect(await h.sql('select node_id, gpus::text as gpus from nodes where cluster_uid = $1', [c.uid])).toEqual([{ node_id: 'n-big', gpus: String(2 ** 31) }]);
    peer.close();
  });

  it('the largest count (2^53 − 1) in every count field of a node and a GPU is stored and read back as a JSON number', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const max = Number.MAX_SAFE_INTEGER;
    peer.send('node.observed', { ...node('n-max'), allocatable: { gpus: max, cpu_millis: max, memory_mb: max } });
    peer.send('device.observed', device('GPU-max', { node_id: 'n-max', memory_total_mb: max }));
    await peer.ackedThrough(2, 8_000);
    expect(await h.sql('select seq from rejections where cluster_uid = $1', [c.uid])).toEqual([]);
    const nodes = await h.admin('GET', `/clusters/${c.name}/nodes`);
    expect(nodes.status).toBe(200);
    expect(nodes.json.items).toMatchObject([{ node_id: 'n-max', allocatable: { gpus: max, cpu_millis: max, memory_mb: max } }]);
    const devices = await h.admin('GET', `/clusters/${c.name}/devices`);
    expect(devices.status).toBe(200);
    expect(devices.json.items).toMatchObject([{ device_id: 'GPU-max', memory_total_mb: max }]);
    peer.close();
  });

  it('a count above 2^53 − 1 is still a poison frame (outside the contract), recorded and acknowledged', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const n = node('n-over');
    peer.send('node.observed', { ...n, allocatable: { ...n.allocatable, gpus: 2 ** 53 } });
    peer.send('node.observed', node('n-after'));
    await peer.ackedThrough(2, 8_000);
    expect(await h.sql('select seq, reason from rejections where cluster_uid = $1', [c.uid])).toEqual([{ seq: '1', reason: expect.stringContaining('allocatable.gpus') }]);
    expect(await h.sql('select node_id from nodes where cluster_uid = $1', [c.uid])).toEqual([{ node_id: 'n-after' }]);
    peer.close();
  });
});
