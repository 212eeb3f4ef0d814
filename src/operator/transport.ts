/**
 * The SDK's only view of the network: dial one WebSocket, send text, close. Behind this interface
 * so tests can inject a scripted link and so a runtime other than Node can bring its own socket.
 */
export interface Transport {
  send(text: string): void;
  /** Close with a code (1000, or 4000–4999 for the protocol's own reasons). */
  close(code: number, reason: string): void;
  /** Bytes accepted by `send` and not yet handed to the network. */
  readonly bufferedAmount: number;
}

export interface TransportEvents {
  /** The upgrade succeeded; the socket is open. */
  onOpen(): void;
  /** One text message. `binary` is set when the peer sent a binary message instead. */
  onMessage(text: string, binary: boolean): void;
  /**
   * The link is gone, for whatever reason (closed by either side, failed to connect, refused at
   * the HTTP level). Called exactly once per dial. `httpStatus` is set when the upgrade was
   * answered with an HTTP status instead, `httpBody` is (the start of) that answer's body, and
   * `retryAfter` its Retry-After header, if any.
   */
  onClose(code: number, reason: string, httpStatus?: number, httpBody?: string, retryAfter?: string): void;
}

export interface DialRequest {
  url: string;
  headers: Record<string, string>;
}

export type Dialer = (request: DialRequest, events: TransportEvents) => Transport;

/**
 * The connect URL from what an operator was configured with: `https://hub.example`,
 * `wss://hub.example`, or the full `wss://hub.example/v1/connect` all mean the same endpoint, with
 * or without a trailing slash (the hub routes `/v1/connect` only: `/v1/connect/` is a 404).
 */
export function connectUrl(base: string): string {
  const u = new URL(base);
  if (u.protocol === 'http:') u.protocol = 'ws:';
  else if (u.protocol === 'https:') u.protocol = 'wss:';
  else if (u.protocol !== 'ws:' && u.protocol !== 'wss:') throw new TypeError(`hub URL must be http(s) or ws(s): ${base}`);
  const path = u.pathname.replace(/\/+$/, '');
  u.pathname = path.endsWith('/v1/connect') ? path : `${path}/v1/connect`;
  return u.toString();
}
