/**
 * The Node transport, on the `ws` package. permessage-deflate is off: it costs more CPU than
 * the small JSON frames save (measured: it caps a client at ~10k frames/s), and the link
 * carries state, not bulk data.
 */
import WebSocket from 'ws';
import { closeReason } from '../protocol';
import type { Dialer, Transport } from './transport';

export interface WsDialerOptions {
  /** Give up on a connect (TCP, TLS and the upgrade) after this long. Default 10 s. */
  handshakeTimeoutMs?: number;
  /** Largest message accepted from the hub. Default 32 MiB. */
  maxPayloadBytes?: number;
}

const MAX_REFUSAL_BODY = 4096;

export function wsDialer(options: WsDialerOptions = {}): Dialer {
  return ({ url, headers }, events) => {
    let closed = false;
    const finish = (code: number, reason: string, httpStatus?: number, httpBody?: string, retryAfter?: string) => {
      if (closed) return;
      closed = true;
      events.onClose(code, reason, httpStatus, httpBody, retryAfter);
    };
    const ws = new WebSocket(url, {
      headers,
      perMessageDeflate: false,
      handshakeTimeout: options.handshakeTimeoutMs ?? 10_000,
      maxPayload: options.maxPayloadBytes ?? 32 * 1024 * 1024,
      followRedirects: false,
    });
    ws.on('open', () => {
      if (!closed) events.onOpen();
    });
    ws.on('message', (data, isBinary) => {
      if (closed) return;
      const text = Array.isArray(data) ? Buffer.concat(data).toString('utf8') : Buffer.from(data as ArrayBuffer).toString('utf8');
      events.onMessage(text, isBinary);
    });
    ws.on('unexpected-response', (_req, res) => {
      const status = res.statusCode ?? 0;
      // The hub explains a refusal in a small JSON body: keep its start, for the refused event.
      const chunks: Buffer[] = [];
      let size = 0;
      const done = () => {
        clearTimeout(bodyTimer);
        ws.terminate();
        const retryAfter = res.headers['retry-after'];
        finish(1006, `upgrade refused with HTTP ${status}`, status, Buffer.concat(chunks).toString('utf8'), typeof retryAfter === 'string' ? retryAfter : undefined);
      };
      const bodyTimer = setTimeout(done, 2_000);
      bodyTimer.unref();
      res.on('data', (chunk: Buffer) => {
        if (size < MAX_REFUSAL_BODY) chunks.push(chunk.subarray(0, MAX_REFUSAL_BODY - size));
        size += chunk.length;
      });
      res.on('end', done);
      res.on('error', done);
    });
    let lastError = '';
    // ws closes the link 1009 itself over a hub frame past `maxPayload`, but reports the close to
    // us as 1006 (abnormal): the code the client acts on (a session that would replay that frame
    // goes lossy) is the one that went on the wire.
    let ownClose: number | null = null;
    ws.on('error', (err) => {
      lastError = err.message;
      if ((err as { code?: unknown }).code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') ownClose = 1009;
      // 'close' follows an 'error' once the socket existed; before that it may not.
      if (ws.readyState === WebSocket.CONNECTING || ws.readyState === WebSocket.CLOSED) finish(ownClose ?? 1006, err.message);
    });
    ws.on('close', (code, reason) => finish(ownClose ?? code, reason.toString('utf8') || lastError));

    const transport: Transport = {
      send(text) {
        if (ws.readyState === WebSocket.OPEN) ws.send(text);
      },
      close(code, reason) {
        if (ws.readyState === WebSocket.CLOSED) return;
        if (ws.readyState === WebSocket.CONNECTING) {
          ws.terminate();
          finish(code, reason);
          return;
        }
        ws.close(code, closeReason(reason));
        // A peer that never answers the close must not hold the link open.
        const t = setTimeout(() => ws.terminate(), 5_000);
        t.unref();
        // The SDK decides the link is over now; the close handshake finishes in the background.
        finish(code, reason);
      },
      get bufferedAmount() {
        return ws.bufferedAmount;
      },
    };
    return transport;
  };
}
