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
}

/** Drive `op` (already welcomed, nextSeq set) and measure. */
export function runLoad(op: RawOperator, o: LoadOptions): Promise<LoadResult> {
  const sentAt = new Float64Array(1 << 22);
  const mask = sentAt.length - 1;
  let acked = op.nextSeq - 1;
  const t0 = performance.now();
  const tMeasure = t0 + o.warmupMs;
  const tEnd = tMeasure + o.measureMs;
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
  const ticker = setInterval(() => {
    if (performance.now() >= tEnd + 30_000) finishRef();
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
      const seconds = o.measureMs / 1000;
      resolve({ frames: framesInWindow, seconds, perSecond: framesInWindow / seconds, latencies, ackSteps, clientCpuSeconds: cpuUsed });
    };
    const off = op.onFrame((f, at) => {
      if (f.ack === null || f.ack <= acked) return;
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
      if (at >= tEnd) finish();
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
