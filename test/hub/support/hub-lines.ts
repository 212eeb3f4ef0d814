/**
 * The hub's JSON log lines as a test sees them: wrangler's dev server forwards the worker's
 * console output to this process's console (coloured), so the console is wrapped and every
 * `{"ts"…}` line is parsed into a live array. Install before the hub starts.
 */
import { afterAll } from 'vitest';

export type HubLine = Record<string, unknown> & { level: string; msg: string };

export function captureHubLines(): HubLine[] {
  const lines: HubLine[] = [];
  // Put back after the file: the hub project shares one module graph and one console among the
  // files a worker runs (vitest `isolate: false`). The hub's log level (E2E_HUB_LOG, which a
  // capturing file sets) goes back to the default with it.
  const saved = { ...console };
  afterAll(() => {
    Object.assign(console, saved);
    delete process.env.E2E_HUB_LOG;
  });
  for (const k of ['log', 'info', 'warn', 'error', 'debug'] as const) {
    const orig = console[k].bind(console);
    (console as unknown as Record<string, (...a: unknown[]) => void>)[k] = (...args: unknown[]) => {
      const text = args.map(String).join(' ').replace(/\x1b\[[0-9;]*m/g, '');
      const at = text.indexOf('{"ts"');
      if (at >= 0) {
        try {
          lines.push(JSON.parse(text.slice(at, text.lastIndexOf('}') + 1)) as HubLine);
        } catch {
          // not one of the hub's lines
        }
      }
      orig(...args);
    };
  }
  return lines;
}
