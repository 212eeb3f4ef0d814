import { CloseCode } from '../protocol';
import type { HubConfig } from './config';
import type { Logger } from './log';
import { residencyProblem } from './region';

/** What an RPC method of a misplaced object throws (RPC carries the message across). */
export class ResidencyError extends Error {
  override readonly name = 'ResidencyError';
}

/**
 * A Durable Object's residency gate (issue 14), the session object's and the gateway shard's: a
 * misrouted object is a residency breach, not a
 * warning, so an object outside the deployment's jurisdiction serves nothing, at every entry
 * point the runtime or a caller can reach. Decided once per instance (an object's id never
 * changes); a placed object pays one field read per entry. A misplaced object also builds none
 * of its parts (the constructor stops at the gate), so nothing in it can write its storage.
 *
 * It does delete it, at whichever entry wakes it. Such an object is one created before its region
 * had a jurisdiction (README, "Adding a jurisdiction"): the connect route now addresses the
 * jurisdiction's objects only, so it can never be resumed, and the retention that would have
 * deleted its storage (the session record, a replay buffer with desired state) runs in the parts
 * it no longer builds. Its alarm, which every object with a session holds, is the entry that
 * always comes.
 */
export class ResidencyGate {
  /** Why this object must not serve; null when it lives where it must. */
  readonly problem: string | null;
  private discarding: Promise<void> | null = null;

  constructor(
    id: DurableObjectId,
    private readonly cfg: HubConfig,
    private readonly log: Logger,
    private readonly storage: DurableObjectStorage,
  ) {
    this.problem = residencyProblem(id, cfg);
  }

  get misplaced(): boolean {
    return this.problem !== null;
  }

  /** What fetch (a connect) answers in a misplaced object: HTTP 500 before any upgrade, so the operator backs off and retries. */
  refusal(): Response {
    this.report('fetch');
    this.discardInBackground();
    return Response.json({ error: { code: 'internal', message: this.message() } }, { status: 500 });
  }

  /** An RPC method: throws a ResidencyError in a misplaced object. */
  enter(method: string): void {
    if (!this.problem) return;
    this.report(method);
    this.discardInBackground();
    throw new ResidencyError(this.message());
  }

  /**
   * The alarm or a socket event: true in a misplaced object, which then does nothing but delete
   * its storage (the alarm awaits that: discard()). The socket is closed; the alarm is not set
   * again (the runtime drops the one that fired, so it cannot loop).
   */
  refuses(event: string, ws?: WebSocket): boolean {
    if (!this.problem) return false;
    this.report(event);
    this.discardInBackground();
    try {
      ws?.close(CloseCode.INTERNAL, 'residency check failed');
    } catch {
      // already closed
    }
    return true;
  }

  /**
   * Delete a misplaced object's storage and alarm: once per instance, again after a failure. The
   * alarm awaits it, so a failed delete throws there and the runtime retries the alarm.
   */
  discard(): Promise<void> {
    if (!this.problem) return Promise.resolve();
    this.discarding ??= this.deleteStorage().catch((err: unknown) => {
      this.discarding = null;
      throw err;
    });
    return this.discarding;
  }

  /** From an entry that cannot wait: the runtime completes a storage call nobody awaits. */
  private discardInBackground(): void {
    this.discard().catch((err: unknown) => this.log.error('RESIDENCY: deleting the storage of a misplaced object failed', { error: String(err) }));
  }

  private async deleteStorage(): Promise<void> {
    // Data and alarm in one atomic call (store.ts, destroy).
    await this.storage.deleteAll();
    this.log.warn("RESIDENCY: deleted the storage of an object outside the deployment's jurisdiction (a session there can never be resumed)", {
      region: this.cfg.HUB_REGION ?? null,
      reason: this.problem,
    });
  }

  private message(): string {
    return `residency check failed: ${this.problem}`;
  }

  private report(entry: string): void {
    this.log.error("RESIDENCY: refusing to serve outside the deployment's jurisdiction", {
      region: this.cfg.HUB_REGION ?? null,
      entry,
      reason: this.problem,
    });
  }
}
