/**
 * The hot-paths micro benchmark's cases (bench/micro/hot-paths.ts), runtime-agnostic: each takes
 * the modules of two source trees, a baseline's and the working tree's, so Node and workerd run
 * the same code on both.
 *
 * - the ingest schedule: 4,000 accepted device.observed frames, then two statements' worth of
 *   the pipeline's calls (the steady state, nothing held): `next()` → `succeeded()`, and where the
 *   tree has it the statement behind (`behind()` → `behindSucceeded()`);
 * - building one 2,000-frame device.observed batch (`buildBatch`, its last-wins maps);
 * - a Pg connection's idle timer around one statement: cancelled and re-armed (before) or left
 *   armed with the statement's end stamped (after);
 * - `readFrame` of a device.observed frame and of a node.event frame (its occurred_at a second
 *   time in UTC), as the SDK writes them: the envelope, its ts, the payload;
 * - the admin API's body guard (`unsafeValue`) over a bulk PUT of 1,000 deployments and over one
 *   deployment's PUT, as the desired scenario sends them.
 */
import type * as ScheduleModule from '../../src/hub/session/ingest-schedule';
import type * as BatchModule from '../../src/hub/session/ingest-batch';
import type * as OutgoingModule from '../../src/hub/session/outgoing';
import type * as ProtocolModule from '../../src/protocol';
import type * as GuardModule from '../../src/hub/admin/body-guard';
import { bulkDesiredBody, DESIRED_BODY } from '../lib/payloads';
import { deviceItems, framesOf, measure } from './cases';

export interface Tree {
  schedule: typeof ScheduleModule;
  batch: typeof BatchModule;
  outgoing: typeof OutgoingModule;
  protocol: typeof ProtocolModule;
  guard: typeof GuardModule;
}

export interface HotRow {
  path: string;
  /** Median ns per unit. */
  before: number;
  after: number;
}

const FRAMES = 4_000;
/** The ingest bench's window: five statements' worth, so a sliding tree reaches its steady state. */
const SCHEDULE_FRAMES = 10_000;
const BATCH = 2_000;

function scheduleCycle(t: Tree, items: ReturnType<typeof deviceItems>): () => number {
  return () => {
    const s = new t.schedule.IngestSchedule({ ...t.schedule.DEFAULT_SCHEDULE_LIMITS, maxBatch: BATCH });
    for (const item of items) s.push(item);
    let applied = 0;
    // As the pipeline calls it: a second statement behind the first where the tree has one, and
    // where it slides (`promoteBehind`), the second takes the first's place when it commits and
    // another goes behind it.
    const behind = (s as { behind?: (now: number) => unknown[] | null }).behind?.bind(s);
    const promote = (s as { promoteBehind?: () => void }).promoteBehind?.bind(s);
    for (;;) {
      const plan = s.next(0);
      if (!('run' in plan)) break;
      let second = behind ? behind(0) : null;
      applied += s.succeeded().length;
      while (second && promote && behind) {
        promote();
        second = behind(0);
        applied += s.succeeded().length;
      }
      if (second) applied += (s as unknown as { behindSucceeded(): unknown[] }).behindSucceeded().length;
    }
    if (applied !== items.length) throw new Error(`schedule applied ${applied} of ${items.length}`);
    return applied;
  };
}

/**
 * The idle timer of a Pg connection around one statement, as src/hub/pg.ts did it (cancel at the
 * start, cancel and re-arm at the end) and as it does now (one timer stays armed; the statement
 * only stamps when it ended). The runtime's own timers, not a model of them.
 */
function idleTimer(rearm: boolean): { step: () => number; done: () => void } {
  let timer: ReturnType<typeof setTimeout> | null = null;
  let idleSince = 0;
  const fire = () => {
    timer = null;
  };
  const step = rearm
    ? () => {
        if (timer) clearTimeout(timer);
        timer = null;
        // (the statement)
        if (timer) clearTimeout(timer);
        timer = setTimeout(fire, 60_000);
        return 1;
      }
    : () => {
        // (the statement)
        idleSince = Date.now();
        if (!timer) timer = setTimeout(fire, 60_000);
        return idleSince;
      };
  return { step, done: () => timer && clearTimeout(timer) };
}

export function hotSuite(before: Tree, after: Tree, runs: number, ms: number): HotRow[] {
  const items = deviceItems(FRAMES, 'fast');
  const scheduleItems = deviceItems(SCHEDULE_FRAMES, 'fast');
  const batchItems = items.slice(0, BATCH);
  const rows: HotRow[] = [];
  const row = (path: string, b: () => unknown, a: () => unknown, units: number) => {
    // Interleaved, the order flipped each round: whichever tree runs second in a process that has
    // run the other measured differently by up to 20% in Node (shared inline caches and GC state).
    const [bs, as] = [[] as number[], [] as number[]];
    for (let r = 0; r < runs; r++) {
      if (r % 2 === 0) bs.push(measure(b, units, 1, ms).ns), as.push(measure(a, units, 1, ms).ns);
      else as.push(measure(a, units, 1, ms).ns), bs.push(measure(b, units, 1, ms).ns);
    }
    const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[xs.length >> 1]!;
    rows.push({ path, before: median(bs), after: median(as) });
  };
  row(
    "ingest schedule: the pipeline's calls, per frame (10,000 frames, 5 statements; behind the first where the tree can, sliding where it can)",
    scheduleCycle(before, scheduleItems),
    scheduleCycle(after, scheduleItems),
    SCHEDULE_FRAMES,
  );
  row('buildBatch, per frame (2,000 device.observed)', () => before.batch.buildBatch(batchItems, {}), () => after.batch.buildBatch(batchItems, {}), BATCH);
  // Not code of either tree: the same runtime calls both ways (the timer's bookkeeping is all there is to it).
  const [rearm, stamp] = [idleTimer(true), idleTimer(false)];
  row('Pg idle timer, per statement: cancel + re-arm (before) / stamp (after)', rearm.step, stamp.step, 1);
  rearm.done();
  stamp.done();
  for (const type of ['device.observed', 'node.event'] as const) {
    const frames = framesOf(type);
    const read = (t: Tree) => () => {
      let n = 0;
      for (const f of frames) if (t.protocol.readFrame(f).kind === 'message') n++;
      if (n !== frames.length) throw new Error(`readFrame refused ${frames.length - n} of ${frames.length} ${type} frames`);
      return n;
    };
    row(`readFrame, per ${type} frame (envelope, ts, payload)`, read(before), read(after), frames.length);
  }
  // Parsed from the text the scenario sends, as the guard sees it after its JSON.parse.
  const bulk: unknown = JSON.parse(JSON.stringify(bulkDesiredBody(Array.from({ length: 1_000 }, (_, i) => `dep-${i}`))));
  const single: unknown = JSON.parse(JSON.stringify(DESIRED_BODY));
  const guard = (t: Tree, body: unknown) => () => {
    if (t.guard.unsafeValue(body, []) !== null) throw new Error('the guard refused a clean body');
    return 1;
  };
  row('admin body guard, per bulk PUT of 1,000 deployments', guard(before, bulk), guard(after, bulk), 1);
  row("admin body guard, per single deployment's PUT", guard(before, single), guard(after, single), 1);
  return rows;
}
