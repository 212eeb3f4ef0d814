/**
 * Frames that arrive while a hello is in progress, held until it settles (it may change which
 * connection carries the session). Bounded: a claim can wait seconds on Postgres, and what is
 * held is memory of an isolate other clusters' objects share.
 */
export class HeldFrames {
  private frames: [WebSocket, string][] = [];
  /** UTF-16 units held. */
  private chars = 0;

  /** `maxChars`: eight frames of the largest size. */
  constructor(private readonly maxChars: number) {}

  /** False when holding it would pass the bound: the sender is told to come back instead. */
  hold(ws: WebSocket, message: string): boolean {
    if (this.chars + message.length > this.maxChars) return false;
    this.frames.push([ws, message]);
    this.chars += message.length;
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

/** How much may wait for a hello to settle: this many frames of the largest size. */
export const HELD_FRAMES_OF_MAX_SIZE = 8;
