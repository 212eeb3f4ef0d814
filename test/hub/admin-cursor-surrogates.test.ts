/**
 * A cursor whose key the hub could never have issued, and could not even bind as it reads: a lone
 * UTF-16 surrogate (valid in a JSON string escape, not in UTF-8). It used to be bound as U+FFFD,
 * past every real key, so the client got an empty page marked complete (`next_cursor: null`) for a
 * list that has items, instead of a 400 naming `cursor`.
 */
import { describe, expect, it } from 'vitest';
import { useHub } from './support/hub';

const h = useHub();

/** base64url of JSON text written by hand, so the escape survives as a lone surrogate. */
const cursorOf = (json: string) => Buffer.from(json).toString('base64url');

describe('a forged cursor key', () => {
  it('a lone surrogate in a cursor key is a 400 naming cursor, not an empty page presented as the last', async () => {
    const c = await h.newCluster('lone');
    const paths = [
      `/clusters?cursor=${cursorOf('["cl","\\ud800"]')}`,
      `/clusters/${c.name}/nodes?cursor=${cursorOf('["nd","\\udc00a"]')}`,
      `/clusters/${c.name}/deployments?cursor=${cursorOf('["dp","a\\ud800"]')}`,
      `/clusters/${c.name}/devices?cursor=${cursorOf('["dv","\\ud800"]')}`,
      `/clusters/${c.name}/events?cursor=${cursorOf('["ev","2026-01-01T00:00:00.000000Z","\\ud800"]')}`,
      `/clusters/${c.name}/operations?cursor=${cursorOf('["op","2026-01-01T00:00:00.000000Z","\\ud800"]')}`,
    ];
    for (const p of paths) {
      const r = await h.admin('GET', p);
      expect([r.status, r.json?.error?.code, r.json?.error?.field], p).toEqual([400, 'invalid', 'cursor']);
    }
    // A surrogate pair (a real astral character) is still a key like any other.
    const pair = await h.admin('GET', `/clusters?cursor=${cursorOf('["cl","\\ud83d\\ude00"]')}`);
    expect(pair.status).toBe(200);
  });
});
