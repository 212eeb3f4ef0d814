/**
 * A session object's log lines name what they are about: cluster, session and seq once a session
 * is open, and the cluster and connection before (a refusal at the handshake). A poison frame the
 * database refuses is logged loudly, and a line that does not say which cluster sent it cannot be
 * acted on.
 */
import { describe, expect, it, vi } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { admin, connect, eventually, newCluster, node } from './support/peer';

type Line = { level: string; msg: string; cluster?: string; session?: string; seq?: number; connection?: string; reason?: string };

const lines = (calls: unknown[][]): Line[] =>
  calls
    .map((args) => String(args[0]))
    .filter((s) => s.startsWith('{'))
    .map((s) => JSON.parse(s) as Line);

describe('session log lines', () => {
  it('a frame the database refuses is logged with its cluster, session and seq', async () => {
    const errors = vi.spyOn(console, 'error');
    try {
      const c = await newCluster('logs');
      const peer = await connect(c.token);
      const welcome = await peer.hello({ cluster_id: c.name });
      const session = welcome.payload.session_id as string;
      peer.send('node.observed', node('n1'));
      // One at a time: this pool can reorder a burst of messages to an object (support/peer.ts).
      await peer.ackedThrough(1);
      // Postgres refuses a NUL in text: data no retry can store.
      const refusedId = peer.send('node.observed', { ...node('n-nul'), name: 'bad\u0000name' });
      const answer = await peer.next((f) => f.type === 'error' && f.reply_to === refusedId, 10_000);
      expect(answer.payload).toMatchObject({ code: 'invalid', message: expect.stringMatching(/database refused/) });

      const poison = await eventually(async () => lines(errors.mock.calls).find((l) => l.msg.startsWith('poison frame: database refused')), 5_000);
      expect(poison).toMatchObject({ level: 'error', cluster: c.uid, session, seq: 2 });
      peer.close();
    } finally {
      errors.mockRestore();
    }
  });

  it('a hello refused before any session opened is logged with the cluster and connection', async () => {
    const warnings = vi.spyOn(console, 'warn');
    try {
      const c = await newCluster('logs');
      const other = await newCluster('logs-other');
      const peer = await connect(c.token);
      // The token decides the cluster: a hello naming another one is refused (4400).
      peer.send('hello', { cluster_id: other.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
      expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
      const refused = await eventually(async () => lines(warnings.mock.calls).find((l) => l.msg === 'connection refused' && l.cluster === c.uid), 5_000);
      expect(refused.connection).toMatch(/^[0-9A-HJKMNP-TV-Z]{26}$/);
      expect(refused.reason).toMatch(/^hello.cluster_id does not name/);
    } finally {
      warnings.mockRestore();
    }
  });

  it("the Worker's refusal of a disabled cluster names the cluster", async () => {
    const warnings = vi.spyOn(console, 'warn');
    try {
      const c = await newCluster('logs');
      expect((await admin('POST', `/clusters/${c.name}/disable`)).status).toBe(200);
      const peer = await connect(c.token);
      expect((await peer.closedWith()).code).toBe(CloseCode.REFUSED);
      const refused = await eventually(async () => lines(warnings.mock.calls).find((l) => l.msg === 'connect refused' && l.reason === 'cluster is disabled'), 5_000);
      expect(refused.cluster).toBe(c.uid);
    } finally {
      warnings.mockRestore();
    }
  });
});
