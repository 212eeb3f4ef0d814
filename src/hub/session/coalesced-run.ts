/**
 * Runs an async pass on request, one pass at a time. Requests made while a pass runs coalesce
 * into a single further pass, so queuing a page of frames costs one or two passes, not one
 * chained promise per frame. Every request is followed by a pass that starts after it: no
 * request may find the runner still marked busy once its last pass has decided to stop.
 */
export class CoalescedRun {
  private requested = false;
  private running: Promise<void> | null = null;

  constructor(
    private readonly pass: () => Promise<void>,
    /** A pass threw: what is pending is abandoned (the caller decides how to recover). */
    private readonly onError: (err: unknown) => void,
  ) {}

  request(): Promise<void> {
    this.requested = true;
    if (!this.running) this.running = this.loop();
    return this.running;
  }

  private async loop(): Promise<void> {
    try {
      while (this.requested) {
        this.requested = false;
        await this.pass();
      }
    } catch (err) {
      this.requested = false;
      this.onError(err);
    } finally {
      // Cleared in the same turn as the loop's last check of `requested` (a `.finally()` on the
      // returned promise would clear it a microtask later, and a request in between would be lost).
      this.running = null;
      // A request made by onError itself.
      if (this.requested) this.running = this.loop();
    }
  }
}
