import { readFile } from 'node:fs/promises';
import { writeFileAtomic } from '../atomic-file';
import { ModelState } from './model';

/**
 * The simulated cluster's own state on disk (its "CRDs"): the SDK's cursor lives beside it, so
 * both must be durable together. Saves are atomic and coalesced; `flush()` resolves once
 * everything requested so far is on disk, which is what a handler awaits before saying applied.
 */
export class SimStateFile {
  private pending: (() => ModelState) | null = null;
  private writing: Promise<void> | null = null;

  constructor(readonly path: string) {}

  async load(): Promise<ModelState | null> {
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
    return ModelState.parse(JSON.parse(text));
  }

  /** Ask for a save of whatever `state()` returns when the write starts. */
  request(state: () => ModelState): void {
    this.pending = state;
    this.writing ??= this.drain();
  }

  /** Resolves when every requested save has been written. */
  async flush(): Promise<void> {
    while (this.writing) await this.writing;
  }

  private async drain(): Promise<void> {
    try {
      while (this.pending) {
        const state = this.pending();
        this.pending = null;
        await writeFileAtomic(this.path, JSON.stringify(state));
      }
    } finally {
      this.writing = null;
    }
  }
}
