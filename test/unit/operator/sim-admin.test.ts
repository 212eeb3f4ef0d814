import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createCluster, httpBase } from '../../../src/operator/sim/admin';

let close: (() => Promise<void>) | null = null;
afterEach(async () => {
  await close?.();
  close = null;
});

async function serve(status: number, body: unknown): Promise<{ url: string; requests: { method?: string; url?: string; auth?: string; body: string }[] }> {
  const requests: { method?: string; url?: string; auth?: string; body: string }[] = [];
  const server = createServer((req, res) => {
    let data = '';
    req.on('data', (c) => (data += c));
    req.on('end', () => {
      requests.push({ method: req.method, url: req.url, auth: req.headers.authorization, body: data });
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  close = () => new Promise((r) => server.close(() => r()));
  return { url: `ws://127.0.0.1:${(server.address() as AddressInfo).port}/v1/connect`, requests };
}

describe('admin API client for the simulator', () => {
  it('derives the HTTP base from a ws URL', () => {
    expect(httpBase('wss://hub.example.com/v1/connect')).toBe('https://hub.example.com');
    expect(httpBase('http://127.0.0.1:8787')).toBe('http://127.0.0.1:8787');
  });

  it('creates a cluster with the admin bearer token and returns its enrollment token', async () => {
    const hub = await serve(201, { uid: 'u1', name: 'sim-1', enrollment_token: 'wsmet_abc' });
    await expect(createCluster(hub.url, 'admin-t', 'sim-1')).resolves.toEqual({ uid: 'u1', name: 'sim-1', enrollment_token: 'wsmet_abc' });
    expect(hub.requests).toEqual([{ method: 'POST', url: '/admin/clusters', auth: 'Bearer admin-t', body: '{"name":"sim-1"}' }]);
  });

  it('fails loudly on anything but 201 with the documented body', async () => {
    const refused = await serve(401, { error: 'nope' });
    await expect(createCluster(refused.url, 'bad', 'x')).rejects.toThrow(/401/);
    await close?.();
    const odd = await serve(201, { uid: 'u1' });
    await expect(createCluster(odd.url, 'admin-t', 'x')).rejects.toThrow(/unexpected body/);
  });
});
