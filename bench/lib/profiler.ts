/**
 * CPU profile of the hub's isolate in workerd through wrangler's inspector (Chrome DevTools
 * protocol): Profiler.start / Profiler.stop around a piece of work, summarised by self time per
 * function and per source file. Profiling slows the hub down: figures from a profiled run are
 * evidence for where time goes, not results.
 */
import WebSocket from 'ws';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  hitCount?: number;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

export interface ProfileSummary {
  totalMs: number;
  /** Busy (non-idle) sampled time. */
  busyMs: number;
  topFunctions: { name: string; selfMs: number; share: number }[];
  topFiles: { file: string; selfMs: number; share: number }[];
}

export class Inspector {
  private nextId = 1;
  private pending = new Map<number, (r: any) => void>();
  private constructor(private readonly ws: WebSocket) {
    ws.on('message', (d) => {
      const m = JSON.parse(String(d)) as { id?: number; result?: unknown; error?: unknown };
      if (m.id !== undefined) {
        const p = this.pending.get(m.id);
        this.pending.delete(m.id);
        p?.(m.error ? { error: m.error } : m.result);
      }
    });
  }

  static async connect(inspectorUrl: URL): Promise<Inspector> {
    const base = `http://${inspectorUrl.host}`;
    const list = (await (await fetch(`${base}/json`)).json()) as { webSocketDebuggerUrl?: string; title?: string }[];
    const target = list.find((t) => t.webSocketDebuggerUrl);
    if (!target?.webSocketDebuggerUrl) throw new Error(`no inspector target at ${base}/json`);
    const ws = new WebSocket(target.webSocketDebuggerUrl, { perMessageDeflate: false, maxPayload: 1 << 30 });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return new Inspector(ws);
  }

  send<T = any>(method: string, params: Record<string, unknown> = {}, timeoutMs = 30_000): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`inspector: ${method} timed out`));
      }, timeoutMs);
      this.pending.set(id, (r) => {
        clearTimeout(timer);
        resolve(r as T);
      });
      if (this.ws.readyState !== WebSocket.OPEN) {
        clearTimeout(timer);
        reject(new Error('inspector connection closed'));
        return;
      }
      this.ws.send(JSON.stringify({ id, method, params }));
    });
  }

  /** Run `fn` under the profiler; the summary is null when the profile could not be taken (the result is kept). */
  async profile<T>(fn: () => Promise<T>): Promise<[T, ProfileSummary | null]> {
    this.ws.on('error', () => undefined);
    await this.send('Profiler.enable');
    // 1 ms: a whole scenario at a finer interval makes a profile large enough to take workerd down.
    await this.send('Profiler.setSamplingInterval', { interval: 1_000 });
    await this.send('Profiler.start');
    let result: T;
    try {
      result = await fn();
    } finally {
      // stop below
    }
    try {
      const r = await this.send<{ profile?: Profile; error?: unknown }>('Profiler.stop');
      return [result, r?.profile ? summarize(r.profile) : null];
    } catch {
      return [result, null]; // e.g. the scenario restarted the hub: that inspector is gone
    }
  }

  close(): void {
    this.ws.close();
  }
}

function shortUrl(url: string): string {
  if (!url) return '(native)';
  const i = url.lastIndexOf('/src/');
  if (i >= 0) return url.slice(i + 1);
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) return url.slice(nm + 'node_modules/'.length);
  return url.replace(/^.*\//, '');
}

export function summarize(p: Profile): ProfileSummary {
  const totalMs = (p.endTime - p.startTime) / 1000;
  const totalHits = p.nodes.reduce((a, n) => a + (n.hitCount ?? 0), 0) || 1;
  // workerd takes no samples while the isolate is idle, so spreading the whole span over the
  // samples would inflate a mostly idle profile: a sample stands for the usual gap between samples.
  const deltas = (p.timeDeltas ?? []).filter((x) => x > 0).sort((a, b) => a - b);
  const typicalGapMs = deltas.length ? (deltas[Math.floor(deltas.length / 2)] as number) / 1000 : Number.POSITIVE_INFINITY;
  const msPerHit = Math.min(totalMs / totalHits, typicalGapMs);
  const byFn = new Map<string, number>();
  const byFile = new Map<string, number>();
  let idle = 0;
  for (const n of p.nodes) {
    const hits = n.hitCount ?? 0;
    if (!hits) continue;
    const f = n.callFrame;
    if (f.functionName === '(idle)' || f.functionName === '(program)') {
      idle += hits;
      continue;
    }
    const name = `${f.functionName || '(anonymous)'} ${shortUrl(f.url)}${f.url ? `:${f.lineNumber + 1}` : ''}`;
    byFn.set(name, (byFn.get(name) ?? 0) + hits);
    const file = f.url ? shortUrl(f.url) : f.functionName.startsWith('(') ? f.functionName : '(native)';
    byFile.set(file, (byFile.get(file) ?? 0) + hits);
  }
  // workerd reports no (idle); (program) is time outside JavaScript that V8 cannot attribute
  // (including waiting), so shares are of the attributed time: JS, GC and native calls.
  const unattributed = p.nodes
    .filter((n) => n.callFrame.functionName === '(idle)' || n.callFrame.functionName === '(program)')
    .reduce((a, n) => a + (n.hitCount ?? 0), 0);
  const busyHits = totalHits - unattributed;
  const busyMs = busyHits * msPerHit;
  const top = (m: Map<string, number>) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 15)
      .map(([k, v]) => ({ key: k, selfMs: v * msPerHit, share: v / Math.max(1, busyHits) }));
  void idle;
  return {
    totalMs,
    busyMs,
    topFunctions: top(byFn).map((t) => ({ name: t.key, selfMs: t.selfMs, share: t.share })),
    topFiles: top(byFile).map((t) => ({ file: t.key, selfMs: t.selfMs, share: t.share })),
  };
}
