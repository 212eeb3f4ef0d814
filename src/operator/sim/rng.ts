/**
 * A small seeded generator (mulberry32) so a simulated cluster is reproducible: the same name
 * and seed give the same GPU UUIDs and replica ids. Its state serializes as one number.
 */
export class Rng {
  constructor(private s: number) {
    this.s = s >>> 0;
  }

  get state(): number {
    return this.s;
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  hex(n: number): string {
    let out = '';
    for (let i = 0; i < n; i++) out += Math.floor(this.next() * 16).toString(16);
    return out;
  }

  /** An NVIDIA-style GPU UUID. */
  gpuUuid(): string {
    return `GPU-${this.hex(8)}-${this.hex(4)}-${this.hex(4)}-${this.hex(4)}-${this.hex(12)}`;
  }

  /** A pod-style replica id: the deployment's id and a random suffix, within identifier limits. */
  replicaId(deploymentId: string): string {
    const alphabet = 'bcdfghjklmnpqrstvwxz2456789';
    let suffix = '';
    for (let i = 0; i < 5; i++) suffix += alphabet[Math.floor(this.next() * alphabet.length)];
    return `${deploymentId.slice(0, 240)}-${suffix}`;
  }
}
