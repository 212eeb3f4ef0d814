import { CloseCode } from '../../protocol';
import type { HubConfig } from '../config';
import type { Logger } from '../log';
import { residencyProblem } from '../region';

/** What an RPC method of a misplaced session object throws (RPC carries the message across). */
export class ResidencyError extends Error {
  override readonly name = 'ResidencyError';
}

/**
 * The session object's residency gate (issue 14): a misrouted object is a residency breach, not a
 * warning, so an object outside the deployment's jurisdiction serves nothing, at every entry
 * point the runtime or a caller can reach. Decided once per instance (an object's id never
 * changes); a placed object pays one field read per entry. A misplaced object also builds none
 * of its parts (the constructor stops at the gate), so nothing in it can touch its storage.
 */
export class ResidencyGate {
  /** Why this object must not serve; null when it lives where it must. */
  readonly problem: string | null;

  constructor(
    id: DurableObjectId,
    private readonly cfg: HubConfig,
    private readonly log: Logger,
  ) {
    this.problem = residencyProblem(id, cfg);
  }

  get misplaced(): boolean {
    return this.problem !== null;
  }

  /** What fetch (a connect) answers in a misplaced object: HTTP 500 before any upgrade, so the operator backs off and retries. */
  refusal(): Response {
    this.report('fetch');
    return Response.json({ error: { code: 'internal', message: this.message() } }, { status: 500 });
  }

  /** An RPC method: throws a ResidencyError in a misplaced object. */
  enter(method: string): void {
    if (!this.problem) return;
    this.report(method);
    throw new ResidencyError(this.message());
  }

  /**
   * The alarm or a socket event: true in a misplaced object, which then does nothing else. The
   * socket is closed; the alarm is not set again (the runtime drops the one that fired, so it
   * cannot loop), and not thrown from either (an alarm that throws is retried).
   */
  refuses(event: string, ws?: WebSocket): boolean {
    if (!this.problem) return false;
    this.report(event);
    try {
      ws?.close(CloseCode.INTERNAL, 'residency check failed');
    } catch {
      // already closed
    }
    return true;
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
