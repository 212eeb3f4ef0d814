/**
 * The hub's structured log lines reach this process through wrangler's logger (console). Count
 * them by level and message instead of printing them: they are evidence (e.g. how often the
 * registry was unavailable during a storm), not output.
 */
const JSON_LINE = /\{"ts":"[^"]*","level":"(debug|info|warn|error)","msg":"((?:[^"\\]|\\.)*)"(.*)\}/;
const NOISE = /Request\.cf|workers\.cloudflare\.com|GetAddrInfoReqWrap|getaddrinfo ENOTFOUND/;

const counts = new Map<string, number>();
let installed = false;

export function installHubLogCapture(passThrough = process.env.BENCH_HUB_LOG === '1'): void {
  if (installed) return;
  installed = true;
  for (const method of ['log', 'info', 'warn', 'error', 'debug'] as const) {
    const original = console[method].bind(console);
    console[method] = (...args: unknown[]) => {
      const text = args.map((a) => (typeof a === 'string' ? a : a instanceof Error ? a.stack ?? a.message : '')).join(' ');
      // eslint-disable-next-line no-control-regex
      const plain = text.replace(/\u001b\[[0-9;]*m/g, '');
      const m = JSON_LINE.exec(plain);
      if (m) {
        const err = /"error":"((?:[^"\\]|\\.)*)"/.exec(m[3] ?? '');
        const key = `${m[1]}: ${m[2]}${err ? ` (${(err[1] as string).slice(0, 80)})` : ''}`;
        counts.set(key, (counts.get(key) ?? 0) + 1);
        if (passThrough) original(...args);
        return;
      }
      if (NOISE.test(plain) && !passThrough) return;
      original(...args);
    };
  }
}

/** Counts since the last call, then reset. */
export function takeHubLogCounts(): Record<string, number> {
  const out = Object.fromEntries(counts);
  counts.clear();
  return out;
}

export function describeHubLog(c: Record<string, number>, limit = 8): string {
  const entries = Object.entries(c)
    .filter(([k]) => !k.startsWith('info') && !k.startsWith('debug'))
    .sort((a, b) => b[1] - a[1]);
  if (entries.length === 0) return 'no hub warnings or errors';
  return entries
    .slice(0, limit)
    .map(([k, v]) => `“${k}” ×${v}`)
    .join('; ');
}
