/**
 * npm start and npm run migrate print why a database could not be reached. The Neon driver rejects
 * a failed connect with the `ws` library's ErrorEvent as it is, not an Error: printed with
 * String() it said "[object Object]" (an unreachable Neon DATABASE_URL; found by a read-only
 * review of the front door). The event here is a real one, from ws dialling a closed port.
 */
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { errorText } from '../../scripts/lib/error-text';

async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

describe('errorText', () => {
  it("names the cause of a ws ErrorEvent (what the Neon driver rejects with), where String() says [object Object]", async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${await closedPort()}/v1`);
    const event = await new Promise<unknown>((resolve) => ws.addEventListener('error', resolve));
    expect(String(event)).toBe('[object Object]');
    expect(errorText(event)).toMatch(/ECONNREFUSED/);
  });

  it("an Error's message; anything else as String() says it", () => {
    expect(errorText(new Error('boom'))).toBe('boom');
    expect(errorText('plain')).toBe('plain');
    expect(errorText(42)).toBe('42');
    expect(errorText({ message: 'shaped like one' })).toBe('shaped like one');
  });
});
