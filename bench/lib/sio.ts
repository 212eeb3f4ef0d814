/** Socket.IO client helpers for the baselines. */
import { io as ioClient, type Socket } from 'socket.io-client';

export interface SioClient {
  socket: Socket;
  received: { at: number; payload: Record<string, unknown> }[];
  onDesired(fn: (payload: Record<string, unknown>, at: number) => void): void;
}

export async function sioConnect(url: string, room: string): Promise<SioClient> {
  const socket = ioClient(url, { transports: ['websocket'], forceNew: true, reconnection: false, auth: { cluster: room } });
  const received: SioClient['received'] = [];
  const listeners: ((p: Record<string, unknown>, at: number) => void)[] = [];
  socket.on('deployment.desired', (payload: Record<string, unknown>) => {
    const at = performance.now();
    received.push({ at, payload });
    for (const l of listeners) l(payload, at);
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('connect_error', reject);
  });
  return { socket, received, onDesired: (fn) => listeners.push(fn) };
}
