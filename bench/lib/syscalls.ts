/**
 * Reading an `strace -f -tt -T` log of the hub's workerd over sequential single desired changes
 * (bench/desired-syscalls.ts): the calls that bound each hop of a change, and the spans between.
 */
/** One system call as strace printed it: when it started (s), how long it took (s), what it was. */
export interface Call {
  at: number;
  took: number;
  name: string;
  fd: number;
  text: string;
}

const LINE = /^\d+\s+(\d\d):(\d\d):(\d\d\.\d+)\s+(\w+)\((\d+)(.*?)(?:<(\d+\.\d+)>)?$/;

/** The calls of an `strace -f -tt -T` log that name a file descriptor first (unfinished calls and resumptions are skipped). */
export function parseStrace(log: string): Call[] {
  const calls: Call[] = [];
  for (const line of log.split('\n')) {
    const m = LINE.exec(line);
    if (!m || line.includes('<unfinished')) continue;
    calls.push({
      at: Number(m[1]) * 3600 + Number(m[2]) * 60 + Number(m[3]),
      took: m[7] === undefined ? 0 : Number(m[7]),
      name: m[4] as string,
      fd: Number(m[5]),
      text: m[6] as string,
    });
  }
  return calls;
}

export const SPANS = [
  ['put', 'stmt', 'PUT read → statement written (Worker, RPC, gateway, driver)'],
  ['stmt', 'ready', 'statement → its ReadyForQuery read (proxy, Postgres, its commit)'],
  ['ready', 'fsync', 'ReadyForQuery → the session’s WAL fsync starts (driver, poke RPC, session’s turn)'],
  ['fsync', 'synced', 'the fsync itself'],
  ['synced', 'frame', 'fsync done → frame written to the operator’s socket'],
  ['frame', 'answer', 'frame → the admin’s answer written'],
] as const;

export type Mark = (typeof SPANS)[number][0] | 'answer';

/**
 * Per change, when each boundary call happened. A change starts at a read of a PUT request; the
 * statement is the first write to another socket after it (the driver's masked binary frame),
 * Postgres's answer ends at the read carrying ReadyForQuery ('Z', length 5, status 'I') on that
 * socket, the session's commit is the first fsync after it, the frame the first write carrying a
 * deployment.desired, the answer the first write of an HTTP status line. A change missing any of
 * them (a fleet poll's statement in between, say) is left out.
 */
export function changesOf(calls: Call[]): Record<Mark, number>[] {
  const out: Record<Mark, number>[] = [];
  let cur: Partial<Record<Mark, number>> | null = null;
  let putFd = -1;
  let pgFd = -1;
  for (const c of calls) {
    if (c.name === 'read' && c.text.includes('"PUT /admin/')) {
      cur = { put: c.at };
      putFd = c.fd;
      pgFd = -1;
      continue;
    }
    if (!cur) continue;
    if (cur.stmt === undefined) {
      if (c.name === 'writev' && c.fd !== putFd && c.text.includes('iov_base="\\202')) {
        cur.stmt = c.at;
        pgFd = c.fd;
      }
      continue;
    }
    if (cur.ready === undefined) {
      if (c.name === 'read' && c.fd === pgFd && c.text.includes('Z\\0\\0\\0\\5I')) cur.ready = c.at + c.took;
      continue;
    }
    if (cur.fsync === undefined) {
      if (c.name === 'fsync' || c.name === 'fdatasync') {
        cur.fsync = c.at;
        cur.synced = c.at + c.took;
      }
      continue;
    }
    if (cur.frame === undefined) {
      if ((c.name === 'writev' || c.name === 'write') && c.text.includes('deployment.desire')) cur.frame = c.at;
      continue;
    }
    if ((c.name === 'write' || c.name === 'writev') && c.fd === putFd && c.text.includes('HTTP/1.1 ')) {
      cur.answer = c.at;
      out.push({ ...(cur as Record<Mark, number>) });
      cur = null;
    }
  }
  return out;
}
