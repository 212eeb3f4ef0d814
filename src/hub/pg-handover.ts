/**
 * When one connection's statements reach the driver (`Pg`). The Neon driver queues whatever it
 * is given and sends each one when the one before it ends, however late that is. For most
 * statements that is right: token lookups, claims and polls wait their turn. A strict statement
 * (an admin write, through `Pg.within`) must not be sent late, because it could commit after its
 * caller answered 503 "retry". So it is handed over only when nothing else is in the driver. One
 * still waiting at its send-by time is never sent.
 *
 * At most `maxInDriver` are in the driver at once, and the rest wait here by class: strict ones
 * first, then plain ones, then low ones (a token lookup: anyone with a token of the right shape,
 * which a public checksum gives, causes one), each class in the order asked. So an admin write
 * waits for what is in the driver, not for a queue that a flood of lookups keeps full, and the
 * fleet poll, the sessions' checks and claims wait for no lookup that is not already there.
 *
 * Statements are numbered as they are handed over. The driver answers in order, so an answer
 * to a later statement shows that every earlier one is over. That is how a statement that ran
 * out its deadline on a kept connection (`suspect`) stops holding strict statements back.
 */

interface Waiter {
  strict: boolean;
  go: (number: number) => void;
  timer?: ReturnType<typeof setTimeout>;
}

/** The classes a waiting statement may be of, in the order they are handed over. */
type Rank = 0 | 1 | 2;

export class HandOver {
  /** Statements handed to the driver (connecting, in its queue or running) and not settled. */
  private inDriver = 0;
  /** Statements handed so far: numbers them, for `suspectThrough`. */
  private handed = 0;
  /**
   * After a statement that ran out its deadline on a connection that was kept (-1: none): its
   * number. It may still be running, and the driver would queue a strict statement behind it, so
   * none is handed until one handed after it is answered.
   */
  private suspectThrough = -1;
  /** Statements waiting to be handed over, by class (strict, plain, low), each oldest first (`admit`). */
  private readonly waiting: [Waiter[], Waiter[], Waiter[]] = [[], [], []];

  constructor(
    /** Drop the connection (a new one is opened for the next statement): a suspect may run there. */
    private readonly discardConnection: () => void,
    /** The error of a statement not sent: waited past its send-by time, or refused a place. */
    private readonly notSent: (waitedMs: number) => Error,
    /**
     * Most statements in the driver at once; the rest wait here. A strict statement waits for
     * those in the driver only (it goes ahead of every plain one still waiting here), so this is
     * what it may wait behind. Unbounded, a flood of token lookups (any token of the right shape
     * costs one) filled a gateway connection's driver queue faster than it emptied, and an admin
     * write, a token rotation's, was never handed over within its send-by time: 503 after 503.
     */
    private readonly maxInDriver = Number.POSITIVE_INFINITY,
    /**
     * How long a plain or low statement may wait here before it is dropped unsent: as long as the
     * driver would have kept it queued (its own deadline runs from the moment a statement is asked
     * for, and drops one still queued). Nobody waits for it any more by then.
     */
    private readonly dropAfterMs = Number.POSITIVE_INFINITY,
    /** Most low statements waiting at once; more are refused unsent at once (a flood's backlog). */
    private readonly maxLowWaiting = Number.POSITIVE_INFINITY,
  ) {}

  /** Statements waiting to be handed over. */
  get waitingCount(): number {
    return this.waiting[0].length + this.waiting[1].length + this.waiting[2].length;
  }

  /**
   * A statement's number, at once or once its turn comes. Statements go by class (strict, plain,
   * `low`), in the order asked within one; a strict one only when nothing else is in the driver
   * (one still waiting at its send-by time, `ms`, is rejected with `notSent`), the others while
   * fewer than `maxInDriver` are (one still waiting after `dropAfterMs` is rejected with `notSent`).
   */
  next(strict: boolean, ms: number, low = false): number | Promise<number> {
    const waiting = this.waitingCount;
    if (strict && waiting === 0) this.dropSuspect();
    if (waiting === 0 && (strict ? this.idle() : this.inDriver < this.maxInDriver)) return this.take();
    // Ahead of the waiters of a lower class, behind those of its own: a strict one must go within
    // its send-by time, and a low one (what anyone can cause without a credential) waits for the
    // hub's own work.
    const rank: Rank = strict ? 0 : low ? 2 : 1;
    const queue = this.waiting[rank];
    if (rank === 2 && queue.length >= this.maxLowWaiting) return Promise.reject(this.notSent(0));
    return new Promise((resolve, reject) => {
      const waiter: Waiter = { strict, go: resolve };
      const limit = strict ? ms : this.dropAfterMs;
      if (Number.isFinite(limit)) {
        waiter.timer = setTimeout(() => {
          const i = queue.indexOf(waiter);
          if (i < 0) return; // handed over in the same instant
          queue.splice(i, 1);
          reject(this.notSent(limit));
          this.admit(); // what waited behind it may go now
        }, Math.max(0, limit));
      }
      queue.push(waiter);
    });
  }

  /** Statement `number` is out of the driver: answered by the server, or not. */
  settled(number: number, answered: boolean): void {
    this.inDriver--;
    if (answered && number > this.suspectThrough) this.suspectThrough = -1;
    this.admit();
  }

  /** Statement `number` ran out its deadline on a connection that was kept: it may still be running. */
  suspect(number: number): void {
    this.suspectThrough = Math.max(this.suspectThrough, number);
  }

  /** The connection is gone: nothing that ran out its deadline can still be running on it. */
  connectionGone(): void {
    this.suspectThrough = -1;
  }

  private take(): number {
    this.handed++;
    this.inDriver++;
    return this.handed;
  }

  /** Nothing in the driver, and nothing that ran out its deadline may still be running there. */
  private idle(): boolean {
    return this.inDriver === 0 && this.suspectThrough < 0;
  }

  /**
   * With nothing of ours in the driver, a statement that ran out its deadline may still be running
   * there, and no later answer will come to show it is over: start on a new connection.
   */
  private dropSuspect(): void {
    if (this.inDriver > 0 || this.suspectThrough < 0) return;
    this.discardConnection();
    this.suspectThrough = -1;
  }

  private admit(): void {
    for (;;) {
      const queue = this.waiting.find((q) => q.length > 0);
      if (!queue) return;
      const head = queue[0] as Waiter;
      if (head.strict) this.dropSuspect();
      if (head.strict ? !this.idle() : this.inDriver >= this.maxInDriver) return;
      queue.shift();
      if (head.timer !== undefined) clearTimeout(head.timer);
      head.go(this.take());
    }
  }
}
