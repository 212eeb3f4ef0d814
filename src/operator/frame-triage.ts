/**
 * What a readable frame from the hub asks of the link, pure: the receive side's first decision,
 * before sequencing. (The envelope's `ack` is read first, from any readable frame.)
 */
import type { Incoming, Payload } from '../protocol';

export type ReadableFrame = Exclude<Incoming, { kind: 'fatal' }>;

export type Triage =
  /** A protocol error: close the link (4400). */
  | { do: 'close'; reason: string }
  | { do: 'welcome'; payload: Payload<'welcome'> }
  /** The hub explains why it is about to close the link (a refusal, a protocol error). */
  | { do: 'connection-error'; payload: Payload<'error'> }
  | { do: 'answer-ping' }
  /** Nothing more to do (pong, ack: their content was the envelope's ack); `warn` says why when it is odd. */
  | { do: 'ignore'; warn: string | null }
  /** A frame of the session's stream: sequence it. */
  | { do: 'sequenced'; seq: number };

export function triage(frame: ReadableFrame, welcomed: boolean): Triage {
  const env = frame.envelope;
  const isError = frame.kind === 'message' && frame.message.type === 'error';
  if (env.seq === null) {
    if (env.type === 'welcome') {
      if (welcomed) return { do: 'close', reason: 'a second welcome' };
      if (frame.kind !== 'message' || frame.message.type !== 'welcome') {
        return { do: 'close', reason: `unreadable welcome: ${frame.kind === 'poison' ? frame.reason : 'unknown'}` };
      }
      return { do: 'welcome', payload: frame.message.payload };
    }
    if (frame.kind === 'poison') return { do: 'ignore', warn: `unreadable unsequenced frame from the hub ignored: ${frame.reason}` };
    if (isError) return { do: 'connection-error', payload: (frame.message as { payload: Payload<'error'> }).payload };
    if (env.type === 'ping') return { do: 'answer-ping' };
    if (env.type === 'hello') return { do: 'ignore', warn: 'the hub sent a hello; ignored' };
    return { do: 'ignore', warn: null };
  }
  if (!welcomed) {
    // A hub that numbered its refusal anyway: there is no session to number it in, so it is read
    // as the connection-level error it stands for.
    if (isError) return { do: 'connection-error', payload: (frame.message as { payload: Payload<'error'> }).payload };
    return { do: 'close', reason: `sequenced ${env.type} before welcome` };
  }
  return { do: 'sequenced', seq: env.seq };
}
