/**
 * A test double for the hub's side of the link: a real `ws` server that records what the SDK
 * sends and plays frames back exactly as a test scripts them. It implements no hub logic, but
 * every frame it writes is built from the fixture of its type or form (test/support/fixtures.ts),
 * so its envelopes have the shape the real hub's have: a refusal is the connection-level error
 * (`seq: null`), a pong is the canonical one, a welcome replies to the hello.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import type { Envelope, MessageType, Payload } from '../../../../src/protocol';
import { fixture, frameFrom } from '../../../support/fixtures';

/** A frame as the SDK sent it (parsed, untyped payload). */
export type SeenFrame = Omit<Envelope, 'payload'> & {
  payload: Record<string, unknown>;
  /** The exact text received. */
  raw: string;
};

const WAIT_MS = 5_000;

/** Resolve when `probe` returns a value; fail after a generous bound (a hang, not a timing check). */
export async function eventually<T>(probe: () => T | undefined | null | false, what: string, ms = WAIT_MS): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = probe();
    if (v !== undefined && v !== null && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

export class HubConnection {
  readonly frames: SeenFrame[] = [];
  private cursor = 0;
  closed: { code: number; reason: string } | null = null;
  private hubSeq = 0;

  constructor(
    readonly socket: WebSocket,
    readonly headers: IncomingHttpHeaders,
  ) {
    socket.on('message', (data) => {
      const raw = String(data);
      this.frames.push({ ...(JSON.parse(raw) as Omit<SeenFrame, 'raw'>), raw });
    });
    socket.on('close', (code, reason) => {
      this.closed = { code, reason: String(reason) };
    });
  }

  /** The next frame not yet consumed, skipping unsequenced liveness frames unless asked for. */
  async next(options: { includeLiveness?: boolean } = {}): Promise<SeenFrame> {
    return eventually(() => {
      while (this.cursor < this.frames.length) {
        const f = this.frames[this.cursor++] as SeenFrame;
        if (!options.includeLiveness && (f.type === 'ping' || f.type === 'ack' || f.type === 'pong')) continue;
        return f;
      }
      return undefined;
    }, 'the next frame from the SDK');
  }

  /** Consume frames until one of `type` arrives. */
  async nextOf(type: string): Promise<SeenFrame> {
    return eventually(() => {
      while (this.cursor < this.frames.length) {
        const f = this.frames[this.cursor++] as SeenFrame;
        if (f.type === type) return f;
      }
      return undefined;
    }, `a ${type} frame`);
  }

  /** Wait until some frame (consumed or not) satisfies `pred`. */
  async seen(pred: (f: SeenFrame) => boolean, what: string): Promise<SeenFrame> {
    return eventually(() => this.frames.find(pred), what);
  }

  /** The highest ack the SDK has sent on this connection. */
  get highestAck(): number {
    let a = 0;
    for (const f of this.frames) if (f.ack !== null && f.ack > a) a = f.ack;
    return a;
  }

  async waitClosed(): Promise<{ code: number; reason: string }> {
    return eventually(() => this.closed, 'the connection to close');
  }

  sendRaw(text: string): void {
    this.socket.send(text);
  }

  /** The highest ack this double has sent to the SDK. */
  highestAckFromHub = 0;

  /**
   * Send a frame of `type` built from its fixture (`form`: from `fixtures/forms/<type>.<form>.json`
   * instead). A sequenced type needs `seq`. Returns the frame's id (null when the form has none).
   */
  send<T extends MessageType>(
    type: T,
    payload: Payload<T>,
    options: { seq?: number; ack?: number | null; reply_to?: string | null; id?: string; form?: string } = {},
  ): string {
    const { form, ...fill } = options;
    if (options.ack != null && options.ack > this.highestAckFromHub) this.highestAckFromHub = options.ack;
    const text = frameFrom(fixture(form ? `${type}.${form}` : type), { ...fill, payload });
    this.socket.send(text);
    return (JSON.parse(text) as { id: string | null }).id ?? '';
  }

  /** The hello this connection received (the real hub's welcome and refusals reply to it). */
  get helloId(): string | null {
    return this.frames.find((f) => f.type === 'hello')?.id ?? null;
  }

  /**
   * Refuse as the real hub does: the connection-level error (`seq: null`, replying to the hello
   * when there was one), then the close.
   */
  refuse(error: Payload<'error'>, closeCode: number, ack: number | null = null): void {
    this.send('error', error, { form: 'connection', reply_to: this.helloId, ack });
    this.close(closeCode, error.message.slice(0, 120));
  }

  /** The canonical ping (fixtures/ping.json) carrying the hub's cursor. */
  ping(ack = 0): void {
    this.send('ping', {}, { ack });
  }

  /** A sequenced frame numbered by this connection's own counter (set it with `seqFrom`). */
  sendSeq<T extends MessageType>(type: T, payload: Payload<T>, options: { reply_to?: string | null; ack?: number | null; id?: string } = {}): {
    id: string;
    seq: number;
  } {
    const seq = ++this.hubSeq;
    return { id: this.send(type, payload, { ...options, seq }), seq };
  }

  seqFrom(next: number): void {
    this.hubSeq = next - 1;
  }

  welcome(overrides: Omit<Partial<Payload<'welcome'>>, 'limits'> & { limits?: Partial<Payload<'welcome'>['limits']> } = {}): void {
    const { limits, ...rest } = overrides;
    const payload: Payload<'welcome'> = {
      session_id: 'S1',
      ack_seq: 0,
      full_resync: true,
      hub_version: '0.1.0',
      ...rest,
      limits: {
        ping_interval_s: 10,
        idle_timeout_s: 30,
        max_frame_bytes: 1024 * 1024,
        replay_buffer_frames: 1000,
        replay_buffer_bytes: 16 * 1024 * 1024,
        ...limits,
      },
    };
    // As the real hub: the welcome replies to the hello and carries the hub's cursor.
    this.send('welcome', payload, { reply_to: this.helloId, ack: payload.ack_seq });
  }

  close(code = 1000, reason = ''): void {
    this.socket.close(code, reason);
  }

  terminate(): void {
    this.socket.terminate();
  }
}

export class ScriptedHub {
  readonly connections: HubConnection[] = [];
  private taken = 0;
  /** Answer the upgrade with this HTTP status instead of accepting it. */
  refuseWith: number | null = null;
  /** With `refuseWith`: the answer's body (else the status text) and extra headers (Retry-After). */
  refuseBody: string | null = null;
  refuseHeaders: Record<string, string> | null = null;
  /** Upgrade attempts answered (accepted or refused). */
  attempts = 0;
  upgrades = 0;

  private constructor(
    private readonly server: WebSocketServer,
    readonly url: string,
  ) {}

  static async start(): Promise<ScriptedHub> {
    let hub: ScriptedHub | null = null;
    const server = new WebSocketServer({
      host: '127.0.0.1',
      port: 0,
      path: '/v1/connect',
      verifyClient: (_info, cb) => {
        if (hub) hub.attempts++;
        if (hub?.refuseWith) cb(false, hub.refuseWith, hub.refuseBody ?? undefined, hub.refuseHeaders ?? undefined);
        else cb(true);
      },
    });
    await new Promise<void>((resolve) => server.once('listening', () => resolve()));
    const port = (server.address() as AddressInfo).port;
    hub = new ScriptedHub(server, `ws://127.0.0.1:${port}`);
    const h = hub;
    server.on('connection', (socket, req) => h.connections.push(new HubConnection(socket, req.headers)));
    server.on('headers', () => h.upgrades++);
    return h;
  }

  /** The next connection not yet handed to the test. */
  async nextConnection(): Promise<HubConnection> {
    const c = await eventually(() => this.connections[this.taken], 'the SDK to connect');
    this.taken++;
    return c;
  }

  async stop(): Promise<void> {
    for (const c of this.connections) c.terminate();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
