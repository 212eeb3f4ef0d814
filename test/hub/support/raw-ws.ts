/**
 * A WebSocket client written by hand over node:net, for what a library will not send (reserved
 * opcodes, RSV bits, unmasked frames, oversize control frames, invalid UTF-8, a fragment never
 * finished) and will not do (ignore the peer's close frame). It upgrades for real, parses what
 * the hub sends, and records when the hub's side ends the TCP connection.
 */
import { randomBytes } from 'node:crypto';
import net from 'node:net';

export interface RawFrame {
  fin: boolean;
  opcode: number;
  payload: Buffer;
}

export interface RawFrameOptions {
  fin?: boolean;
  /** The three RSV bits, as the byte's 0x70. */
  rsv?: number;
  /** Client frames must be masked (RFC 6455 5.1); false sends one unmasked. */
  mask?: boolean;
}

export class RawSocket {
  readonly frames: RawFrame[] = [];
  /** The hub's close frame, if one came: code (null when it had no body) and reason. */
  closeFrame: { code: number | null; reason: string } | null = null;
  /** The TCP connection ended from the hub's side (FIN or reset) or was torn down. */
  readonly ended: Promise<void>;
  private buf = Buffer.alloc(0);
  private listeners: (() => void)[] = [];
  private endedFlag = false;

  private constructor(private readonly sock: net.Socket) {
    this.ended = new Promise((resolve) => {
      const done = () => {
        this.endedFlag = true;
        this.wake();
        resolve();
      };
      sock.once('end', done);
      sock.once('close', done);
    });
    sock.on('error', () => undefined);
  }

  get isEnded(): boolean {
    return this.endedFlag;
  }

  /** Upgrade `GET /v1/connect` with `token` (and a resume hint); resolves once the hub answered 101. */
  static async connect(httpUrl: string, token: string, hint?: string): Promise<RawSocket> {
    const u = new URL(httpUrl);
    const sock = net.connect({ host: u.hostname, port: Number(u.port) });
    await new Promise<void>((resolve, reject) => {
      sock.once('connect', () => resolve());
      sock.once('error', reject);
    });
    const raw = new RawSocket(sock);
    const key = randomBytes(16).toString('base64');
    sock.write(
      `GET /v1/connect HTTP/1.1\r\nHost: ${u.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
        `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer ${token}\r\n` +
        (hint ? `Wingsmith-Session: ${hint}\r\n` : '') +
        '\r\n',
    );
    let head = Buffer.alloc(0);
    await new Promise<void>((resolve, reject) => {
      const onData = (chunk: Buffer) => {
        head = Buffer.concat([head, chunk]);
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) return;
        sock.off('data', onData);
        const status = head.subarray(0, head.indexOf('\r\n')).toString();
        if (!/^HTTP\/1\.1 101 /.test(status)) return reject(new Error(`upgrade refused: ${status}`));
        sock.on('data', (c: Buffer) => raw.onData(c));
        const rest = head.subarray(end + 4);
        if (rest.length > 0) raw.onData(rest);
        resolve();
      };
      sock.on('data', onData);
      sock.once('close', () => reject(new Error('closed during upgrade')));
    });
    return raw;
  }

  /** Write one frame exactly as described. */
  sendFrame(opcode: number, payload: Buffer | string, opts: RawFrameOptions = {}): void {
    const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
    const masked = opts.mask !== false;
    const b0 = ((opts.fin ?? true) ? 0x80 : 0) | ((opts.rsv ?? 0) & 0x70) | (opcode & 0x0f);
    let header: Buffer;
    if (body.length < 126) header = Buffer.from([b0, (masked ? 0x80 : 0) | body.length]);
    else if (body.length < 65536) {
      header = Buffer.alloc(4);
      header[0] = b0;
      header[1] = (masked ? 0x80 : 0) | 126;
      header.writeUInt16BE(body.length, 2);
    } else {
      header = Buffer.alloc(10);
      header[0] = b0;
      header[1] = (masked ? 0x80 : 0) | 127;
      header.writeBigUInt64BE(BigInt(body.length), 2);
    }
    if (!masked) return void this.sock.write(Buffer.concat([header, body]));
    const key = randomBytes(4);
    const out = Buffer.alloc(body.length);
    for (let i = 0; i < body.length; i++) out[i] = (body[i] as number) ^ (key[i % 4] as number);
    this.sock.write(Buffer.concat([header, key, out]));
  }

  sendText(text: string): void {
    this.sendFrame(0x1, text);
  }

  /** The text frames received so far, parsed. */
  texts(): Array<Record<string, any>> {
    return this.frames.filter((f) => f.opcode === 0x1).map((f) => JSON.parse(f.payload.toString('utf8')) as Record<string, any>);
  }

  /** Resolves once `pred` holds (checked at every frame and at the TCP end), or rejects after `ms`. */
  async until(pred: () => boolean, ms: number, what: string): Promise<void> {
    const deadline = Date.now() + ms;
    while (!pred()) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 100));
        this.listeners.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** Tear the connection down from this side (test clean-up). */
  destroy(): void {
    this.sock.destroy();
  }

  private wake(): void {
    for (const f of this.listeners.splice(0)) f();
  }

  private onData(chunk: Buffer): void {
    this.buf = Buffer.concat([this.buf, chunk]);
    for (;;) {
      if (this.buf.length < 2) return;
      const b0 = this.buf[0] as number;
      const b1 = this.buf[1] as number;
      let len = b1 & 0x7f;
      let off = 2;
      if (len === 126) {
        if (this.buf.length < 4) return;
        len = this.buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (this.buf.length < 10) return;
        len = Number(this.buf.readBigUInt64BE(2));
        off = 10;
      }
      if (b1 & 0x80) off += 4; // a server never masks, but read past a key if one is there
      if (this.buf.length < off + len) return;
      const frame: RawFrame = { fin: (b0 & 0x80) !== 0, opcode: b0 & 0x0f, payload: Buffer.from(this.buf.subarray(off, off + len)) };
      this.buf = this.buf.subarray(off + len);
      this.frames.push(frame);
      if (frame.opcode === 0x8 && !this.closeFrame) {
        this.closeFrame = frame.payload.length >= 2 ? { code: frame.payload.readUInt16BE(0), reason: frame.payload.subarray(2).toString('utf8') } : { code: null, reason: '' };
      }
      this.wake();
    }
  }
}
