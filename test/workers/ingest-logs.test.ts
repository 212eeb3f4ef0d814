/**
 * What the ingest pipeline logs about a session's frames names the session: cluster, session and
 * seq, as every session log line does. A poison frame the database refuses is logged loudly, and
 * a line that does not say which cluster sent it cannot be acted on.
 */
import { describe, expect, it, vi } from 'vitest';
import { connect, eventually, newCluster, node } from './support/peer';

type Line = { level: string; msg: string; cluster?: string; session?: string; seq?: number };

const lines = (calls: unknown[][]): Line[] =>
  calls
    .map((args) => String(args[0]))
    .filter((s) => s.startsWith('{'))
    .map((s) => JSON.parse(s) as Line);

describe('ingest log lines', () => {
  it('a frame the database refuses is logged with its cluster, session and seq', async () => {
    const errors = vi.spyOn(console, 'error');
    const warnings = vi.spyOn(console, 'warn');
    try {
      const c = await newCluster('logs');
      const peer = await connect(c.token);
      const welcome = await peer.hello({ cluster_id: c.name });
      const session = welcome.payload.session_id as string;
      peer.send('node.observed', node('n1'));
      // Postgres refuses a NUL in text: the batch is split until this frame is alone.
      const refusedId = peer.send('node.observed', { ...node('n-nul'), name: 'bad\u0000name' });
      await peer.next((f) => f.type === 'error' && f.reply_to === refusedId, 10_000);

      const poison = await eventually(async () => lines(errors.mock.calls).find((l) => l.msg.startsWith('poison frame: database refused')), 5_000);
      expect(poison).toMatchObject({ level: 'error', cluster: c.uid, session, seq: 2 });
      // Split or not (that depends on whether the two frames shared a statement), every line the
      // pipeline wrote about this session names it.
      for (const l of lines(warnings.mock.calls).filter((x) => x.msg.startsWith('ingest'))) expect(l).toMatchObject({ cluster: c.uid, session });
      peer.close();
    } finally {
      errors.mockRestore();
      warnings.mockRestore();
    }
  });
});
