import { describe, expect, it } from 'vitest';
import { againAfterProxyLoss, DEV_PROXY_LOSS, isProxyLoss } from '../hub/support/proxy-loss';

// The dev proxy's answer, as ProxyWorker.ts builds it (wrangler 4.86, templates/startDevWorker).
const lost = () =>
  new Response(`${DEV_PROXY_LOSS}. Please try sending the request again. Only GET or HEAD requests are retried automatically.`, {
    status: 503,
    headers: { 'Retry-After': '0' },
  });
const hub503 = () => Response.json({ error: { code: 'unavailable', message: 'retry' } }, { status: 503 });

function scripted(answers: (() => Response)[]) {
  let sent = 0;
  return { send: async () => answers[Math.min(sent++, answers.length - 1)]!(), sent: () => sent };
}

describe('a request the dev proxy lost', () => {
  it('is told apart from the hub answering 503', async () => {
    expect(isProxyLoss(503, await lost().text())).toBe(true);
    expect(isProxyLoss(503, await hub503().text())).toBe(false);
    expect(isProxyLoss(200, await lost().text())).toBe(false);
  });

  it('is sent again until an answer of the hub comes', async () => {
    const s = scripted([lost, lost, () => Response.json({ operation_id: 'x' }, { status: 202 })]);
    const res = await againAfterProxyLoss(s.send);
    expect(res.status).toBe(202);
    expect(s.sent()).toBe(3);
  });

  it("returns the hub's own 503 at once, and gives up after three sendings", async () => {
    const a = scripted([hub503]);
    expect((await againAfterProxyLoss(a.send)).status).toBe(503);
    expect(a.sent()).toBe(1);
    const b = scripted([lost]);
    const res = await againAfterProxyLoss(b.send);
    expect(isProxyLoss(res.status, await res.text())).toBe(true);
    expect(b.sent()).toBe(3);
  });
});
