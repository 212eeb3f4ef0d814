/**
 * Frames that arrive while a hello is in progress, held until it settles (it may change which
 * connection carries the session). Bounded: a claim can wait seconds on Postgres, and what is
 * held is memory of an isolate other clusters' objects share.
 */
export class HeldFrames {
  private frames: [WebSocket, string][] = [];
  /** UTF-16 units held, each frame's entry counted as `HELD_FRAME_OVERHEAD` more. */
  private chars = 0;

  /** `maxChars`: eight frames of the largest size. */
  constructor(private readonly maxChars: number) {}

  /**
   * False when holding it would pass the bound: the sender is told to come back instead. A frame
   * costs its entry besides its text: counted by text alone, empty frames were free, and a sender
   * could queue them without limit while a claim waited.
   */
  hold(ws: WebSocket, message: string): boolean {
    const cost = message.length + HELD_FRAME_OVERHEAD;
    if (this.chars + cost > this.maxChars) return false;
    this.frames.push([ws, message]);
    this.chars += cost;
    return true;
  }

  /** Everything held, oldest first, and the bound free again. */
  take(): [WebSocket, string][] {
    const frames = this.frames;
    this.frames = [];
    this.chars = 0;
    return frames;
  }
}

/** What one held frame's entry is counted as, besides its text (an array and its references). */
export const HELD_FRAME_OVERHEAD = 64;

/** How much may wait for a hello to settle: this many frames of the largest size. */
export const HELD_FRAMES_OF_MAX_SIZE = 8;
