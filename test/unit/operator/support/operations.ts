/**
 * What the SDK's operation tests share: a start as the hub sends it, a handler the test settles,
 * a cursor store whose saves can be held, and a session opened the way the hub opens one.
 */
import { MemoryCursorStore, type DurableRecord } from '../../../../src/operator/cursor-store';
import type { OperationContext } from '../../../../src/operator/handlers';
import { newId, type Payload } from '../../../../src/protocol';
import { readResync, type TestClient } from './harness';
import type { HubConnection, ScriptedHub } from './scripted-hub';

/** An operation.start due ten minutes after `now`. */
export function operationStart(now: number, overrides: Partial<Payload<'operation.start'>> = {}): Payload<'operation.start'> {
  return { operation_id: newId(), kind: 'node.drain', target: 'node-a', params: {}, deadline: new Date(now + 600_000).toISOString(), ...overrides };
}

/** An operation handler that runs until the test settles it: `running[i]` concludes the i-th run. */
export function heldOperations(): {
  running: ((outcome: 'succeeded') => void)[];
  operation: (p: Payload<'operation.start'>, ctx: OperationContext) => Promise<{ outcome: 'succeeded'; message: string }>;
} {
  const running: ((outcome: 'succeeded') => void)[] = [];
  return {
    running,
    operation: () => new Promise((resolve) => running.push((outcome) => resolve({ outcome, message: 'done' }))),
  };
}

/** A cursor store whose saves can be held (a slow disk). */
export class GatedStore extends MemoryCursorStore {
  private gate: Promise<void> | null = null;
  private open: (() => void) | null = null;
  /** Saves begun, held or not. */
  begun = 0;
  held = 0;
  /** Loads wait at the gate too (a volume that hangs at start). */
  holdLoads = false;
  hold(): void {
    this.gate = new Promise((r) => (this.open = r));
  }
  release(): void {
    this.open?.();
    this.gate = null;
  }
  override async save(record: DurableRecord): Promise<void> {
    this.begun++;
    if (this.gate) {
      this.held++;
      await this.gate;
    }
    return super.save(record);
  }
  override async load(): Promise<DurableRecord | null> {
    if (this.holdLoads && this.gate) {
      this.held++;
      await this.gate;
    }
    return super.load();
  }
}

/** Start the client and open session `sessionId` on the hub's next connection, its (empty) resync read. */
export async function openSession(hub: ScriptedHub, t: TestClient, sessionId: string): Promise<HubConnection> {
  await t.client.start();
  const conn = await hub.nextConnection();
  await conn.nextOf('hello');
  conn.welcome({ session_id: sessionId });
  await readResync(conn);
  return conn;
}
