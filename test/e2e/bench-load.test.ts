/**
 * The benchmark's windowed sender (bench/lib/load.ts) against the real ws echo server it uses as
 * a baseline: a paced run must end when its measured window does, also against a server that
 * has answered every frame before the window closed.
 */
import { describe, expect, it } from 'vitest';
import { startEchoServer } from '../../bench/lib/children';
import { runLoad } from '../../bench/lib/load';
import { RawOperator } from '../../bench/lib/operator';

describe('the benchmark sender', () => {
  it('ends a paced run against a server that acks every frame at once with its window, not at the 30 s fallback', async () => {
    const echo = await startEchoServer();
    try {
      const op = await RawOperator.connect(`ws://127.0.0.1:${echo.port}`, 'x');
      await op.hello({ cluster_id: 'echo' });
      const t0 = performance.now();
      const r = await runLoad(op, { window: 1_000, warmupMs: 200, measureMs: 500, subjects: 100, rate: 100 });
      const tookMs = performance.now() - t0;
      op.close();
      // About 50 frames in the 0.5 s window at 100 frames/s (one every 10 ms: the last is acked
      // well before the window ends), each acked by the echo.
      expect(r.frames).toBeGreaterThan(25);
      expect(r.latencies).toHaveLength(r.frames);
      // The run is 0.7 s long; waiting for an ack that never comes used to hold it 30 s more.
      expect(tookMs).toBeLessThan(10_000);
    } finally {
      await echo.stop();
    }
  }, 60_000);
});
