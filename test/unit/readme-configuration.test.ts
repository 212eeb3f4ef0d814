/**
 * README's Configuration table is where a deployer looks for a setting: every var the hub's
 * configuration reads is named in its first column (a row may name several), and every var a
 * row names is one the hub reads (a renamed or removed setting leaves no stale row).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { HUB_CONFIG_NAMES } from '../../src/hub/config';

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');

/** The vars named in the first column of the table under "## Configuration". */
function documented(): Set<string> {
  const section = readme.slice(readme.indexOf('\n## Configuration\n'), readme.indexOf('\n## ', readme.indexOf('\n## Configuration\n') + 1));
  const names = new Set<string>();
  for (const line of section.split('\n')) {
    if (!line.startsWith('| `')) continue;
    const first = line.split('|')[1] ?? '';
    for (const m of first.matchAll(/`([A-Z][A-Z0-9_]*)`(?:\s*\/\s*`(_[A-Z0-9_]+)`)?/g)) {
      names.add(m[1] as string);
      // `REPLAY_BUFFER_FRAMES` / `_BYTES`: the second is the first's stem with this ending.
      if (m[2]) names.add((m[1] as string).replace(/_[A-Z0-9]+$/, m[2]));
    }
  }
  return names;
}

describe("README's Configuration table", () => {
  it('names every var the hub reads', () => {
    const named = documented();
    expect(HUB_CONFIG_NAMES.filter((n) => !named.has(n))).toEqual([]);
  });

  it('names no var the hub does not read, besides the secrets', () => {
    // PG_WS_PROXY is read by the database layer itself (src/hub/pg.ts), local development only.
    const known = new Set([...HUB_CONFIG_NAMES, 'DATABASE_URL', 'ADMIN_TOKEN', 'PG_WS_PROXY']);
    expect([...documented()].filter((n) => !known.has(n))).toEqual([]);
  });
});
