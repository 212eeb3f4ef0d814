/**
 * When one connection's statements reach the driver (`Pg`). The Neon driver queues whatever it
 * is given and sends each one when the one before it ends, however late that is. For most
 * statements that is right: token lookups, claims and polls wait their turn. A strict statement
 * (an admin write, through `Pg.within`) must not be sent late, because it could commit after its
 * caller answered 503 "retry". So it is handed over only when nothing else is in the driver. One
 * still waiting at its send-by time is never sent.
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
  /** Statements waiting to be handed over, oldest first (`admit`). */
  private readonly waiting: Waiter[] = [];

  constructor(
    /** Drop the connection (a new one is opened for the next statement): a suspect may run there. */
    private readonly discardConnection: () => void,
    /** The error of a strict statement still waiting at its send-by time: not sent. */
    private readonly notSent: (waitedMs: number) => Error,
  ) {}

  /**
   * A statement's number, at once or once its turn comes. Statements go in the order asked; a
   * strict one only when nothing else is in the driver, and one still waiting at its send-by time
   * (`ms`) is rejected with `notSent`.
   */
  next(strict: boolean, ms: number): number | Promise<number> {
    if (strict && this.waiting.length === 0) this.dropSuspect();
    if (this.waiting.length === 0 && (!strict || this.idle())) return this.take();
    return new Promise((resolve, reject) => {
      const waiter: Waiter = { strict, go: resolve };
      if (strict) {
        waiter.timer = setTimeout(() => {
          const i = this.waiting.indexOf(waiter);
          if (i < 0) return; // handed over in the same instant
          this.waiting.splice(i, 1);
          reject(this.notSent(ms));
          this.admit(); // what waited behind it may go now
        }, Math.max(0, ms));
      }
      this.waiting.push(waiter);
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
    while (this.waiting.length > 0) {
      const head = this.waiting[0] as Waiter;
      if (head.strict) this.dropSuspect();
      if (head.strict && !this.idle()) return;
      this.waiting.shift();
      if (head.timer !== undefined) clearTimeout(head.timer);
      head.go(this.take());
    }
  }
}
