/**
 * A windowed sender of observed frames over one raw connection: keeps at most `window` frames
 * sent and not yet acknowledged, records each frame's send time and the ack that covered it.
 * Works against the hub (acks after commit, per batch) and the echo server (an ack per frame).
 */
import { buildFrame, newId } from '../../src/protocol';
import type { RawOperator } from './operator';
import { device } from './payloads';

export interface LoadResult {
  /** Frames acknowledged inside the measured window. */
  frames: number;
  seconds: number;
  perSecond: number;
  /** Ack latency of each frame acknowledged inside the window (ms). */
  latencies: number[];
  /** Size of each ack advance (frames covered by one ack) inside the window. */
  ackSteps: number[];
  /** Client CPU seconds spent during the window (this process). */
  clientCpuSeconds: number;
}

export interface LoadOptions {
  window: number;
  /** Unmeasured lead-in, then the measured window. */
  warmupMs: number;
  measureMs: number;
  /** Frames per second to pace at; 0 = as fast as the window allows. */
  rate?: number;
  /** Distinct GPUs the frames cycle through. */
  subjects: number;
  /** Offset into the subject space (to keep sessions' rows apart). */
  subjectOffset?: number;
  /**
   * Send exactly this many frames (subjects 0… in order) and resolve once all are acknowledged,
   * whatever the clock says: a pass that makes every subject's row exist before a measured run
   * (`warmupMs`/`measureMs` are then ignored). A timed pass could not promise that: 50 sessions'
   * one-second pass left 58,003 of their 100,000 rows (counted in Postgres), so the measured run
   * inserted the rest while the method said it re-reported existing ones.
   */
  total?: number;
}

/** The smallest power of two of at least twice `window` (and at least 1,024). */
export function ringSize(window: number): number {
  let n = 1_024;
  while (n < 2 * window) n *= 2;
  return n;
}

/** Drive `op` (already welcomed, nextSeq set) and measure. */
export function runLoad(op: RawOperator, o: LoadOptions): Promise<LoadResult> {
  // A ring of send times, indexed by seq: at most `window` frames are outstanding, so a ring of
  // twice that (a power of two) never overwrites one still waiting for its ack. Sized to the
  // window, not fixed: at 32 MiB a run, 50 sessions held 1.6 GiB and the sender's garbage
  // collector ran on both cores. (Its pauses made the sender bursty, and in same-hour pairs both
  // the hub's and the echo's 50-connection figures came out higher that way: bench/before.json.)
  const sentAt = new Float64Array(ringSize(o.window));
  const mask = sentAt.length - 1;
  let acked = op.nextSeq - 1;
  const t0 = performance.now();
  const total = o.total ?? null;
  const lastSeq = total === null ? Infinity : acked + total;
  const tMeasure = total === null ? t0 + o.warmupMs : t0;
  const tEnd = total === null ? tMeasure + o.measureMs : Infinity;
  const latencies: number[] = [];
  const ackSteps: number[] = [];
  let framesInWindow = 0;
  let cpu0: NodeJS.CpuUsage | null = null;
  let cpuUsed = 0;
  let i = 0;
  let done = false;
  const refill = Math.max(1, Math.floor(o.window / 16));
  const socket = (op.ws as unknown as { _socket?: { cork(): void; uncork(): void } })._socket;
  // Paces the sender and ends the run if acks stop coming.
  let lastProgress = t0;
  const ticker = setInterval(() => {
    const now = performance.now();
    // Past the window with every frame acknowledged no ack is coming: a server that acks each
    // frame at once (the echo, paced) has answered the last one before the window ended.
    if (now >= tEnd && acked >= op.nextSeq - 1) finishRef();
    else if (now >= tEnd + 30_000 || now - lastProgress > 60_000) finishRef();
    else pumpRef();
  }, o.rate ? 2 : 10);
  let finishRef: () => void = () => undefined;
  let pumpRef: () => void = () => undefined;

  return new Promise<LoadResult>((resolve, reject) => {
    const finish = () => {
      if (done) return;
      done = true;
      off();
      if (cpu0) {
        const u = process.cpuUsage(cpu0);
        cpuUsed = (u.user + u.system) / 1e6;
      }
      clearInterval(ticker);
      const seconds = total === null ? o.measureMs / 1000 : (performance.now() - t0) / 1000;
      if (total !== null && acked < lastSeq) {
        reject(new Error(`load pass: ${lastSeq - acked} of ${total} frames never acknowledged`));
        return;
      }
      resolve({ frames: framesInWindow, seconds, perSecond: framesInWindow / seconds, latencies, ackSteps, clientCpuSeconds: cpuUsed });
    };
    const off = op.onFrame((f, at) => {
      if (f.ack === null || f.ack <= acked) return;
      lastProgress = at;
      const step = f.ack - acked;
      const inWindow = at >= tMeasure && at < tEnd;
      for (let s = acked + 1; s <= f.ack; s++) {
        if (inWindow) {
          latencies.push(at - (sentAt[s & mask] as number));
          framesInWindow++;
        }
      }
      if (inWindow) ackSteps.push(step);
      acked = f.ack;
      if (at >= tEnd || acked >= lastSeq) finish();
      // Refill in chunks, not one frame per ack: a write per frame would measure syscalls.
      else if (o.window - (op.nextSeq - 1 - acked) >= refill) pump();
    });
    op.onClose((code) => {
      if (!done) {
        done = true;
        off();
        clearInterval(ticker);
        reject(new Error(`connection closed ${code} during load`));
      }
    });
    let pumping = false;
    const pump = () => {
      if (pumping || done) return;
      pumping = true;
      try {
        const now = performance.now();
        if (cpu0 === null && now >= tMeasure) cpu0 = process.cpuUsage();
        if (now >= tEnd) return;
        let budget = o.window - (op.nextSeq - 1 - acked);
        if (o.rate) {
          const due = Math.floor(((now - t0) / 1000) * o.rate) - i;
          budget = Math.min(budget, due);
        }
        // Don't pile megabytes into the socket buffer: the window is the flow control.
        budget = Math.min(budget, 2_000);
        if (total !== null) budget = Math.min(budget, total - i);
        if (budget <= 0) return;
        // One write for the chunk (frames stay separate WebSocket messages).
        socket?.cork();
        const ack = op.ackToSend();
        for (let k = 0; k < budget; k++) {
          const seq = op.nextSeq++;
          const subject = (o.subjectOffset ?? 0) + (i++ % o.subjects);
          sentAt[seq & mask] = performance.now();
          op.sendRaw(buildFrame({ type: 'device.observed', payload: device(subject), seq, ack, id: newId() }));
        }
        socket?.uncork();
      } finally {
        pumping = false;
      }
    };
    finishRef = finish;
    pumpRef = pump;
    pump();
  });
}
