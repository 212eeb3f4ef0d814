/**
 * hello.operator_version is any string of 1-128 characters, and one that is not release-shaped is
 * a source build, admitted: stored on the claim made fit for Postgres (a NUL made the claim fail,
 * answered as a registry outage, 1013, for ever). The peer sends the hello fixture's envelope
 * and varies only that field.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { fixture, frameFrom } from '../support/fixtures';
import { useHub } from './support/hub';

const h = useHub();

function helloText(payload: Record<string, unknown>): string {
  const base = fixture('hello').envelope.payload;
  return frameFrom(fixture('hello'), { payload: { ...base, session_id: null, resume_from: null, ...payload } });
}

describe('hello.operator_version the spec admits', () => {
  it('a non-release-shaped operator_version holding a NUL (a source build) is admitted with a welcome, not refused as a registry outage', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    peer.sendRaw(helloText({ cluster_id: c.name, operator_version: 'dev-\u0000-build' }));
    const first = await peer.next((f) => f.type === 'welcome' || f.type === 'error');
    expect(first.type, JSON.stringify(first.payload)).toBe('welcome');
    expect(first.payload.full_resync).toBe(true);
    peer.close();
  });

  it('whatever the hub makes of such a version, it is never a retryable "registry unavailable" (a 1013 loop)', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    peer.sendRaw(helloText({ cluster_id: c.name, operator_version: '\u0000' }));
    const first = await peer.next((f) => f.type === 'welcome' || f.type === 'error');
    if (first.type === 'error') {
      expect(first.payload.retryable).toBe(false);
      expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
    }
    peer.close();
  });
});
