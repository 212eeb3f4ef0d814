/**
 * A TCP relay in front of Postgres that passes everything through, but can lose the answer of one
 * chosen statement: the statement runs and commits on the server, and its link is reset once the
 * answer is complete (ReadyForQuery), before a byte of it reaches the hub. The hub is left with an
 * outcome it cannot know ("connection lost under the statement, which may still commit").
 *
 * The statement is found by its prepared name in the Parse/Bind bytes (a prefix: `_v` matches any
 * version of it). It can be sent on at once (`resetNextAnswer`) or held first (`holdNext`, then
 * `releaseAndReset`), so that what the test does meanwhile commits before it.
 */
import net from 'node:net';

/** ReadyForQuery (idle): the end of a statement's answer. */
const READY = Buffer.from([0x5a, 0, 0, 0, 5, 0x49]);

export interface AnswerResetRelay {
  port: number;
  /** The next matching statement goes on at once; its link is reset when its answer is complete. Resolves on the reset. */
  resetNextAnswer(): Promise<void>;
  /** Hold the link of the next matching statement from that statement on; resolves once held. */
  holdNext(): Promise<void>;
  /** Deliver the held statement, and reset its link once its answer is complete; resolves on the reset. */
  releaseAndReset(): Promise<void>;
  close(): void;
}

interface Armed {
  hold: boolean;
  /** Called when the statement is seen (held) or its link reset (not held). */
  done: () => void;
}

/** A relay factory for `useHubBehindRelay`, losing the answers of the statement named `statement`. */
export function answerResetRelay(statement: string): (target: { host: string; port: number }) => Promise<AnswerResetRelay> {
  const name = Buffer.from(statement);
  return async (target) => {
    const sockets = new Set<net.Socket>();
    let armed: Armed | null = null;
    let release: (() => Promise<void>) | null = null;
    const server = net.createServer((client) => {
      const upstream = net.connect(target);
      sockets.add(client);
      sockets.add(upstream);
      let held: Buffer[] | null = null;
      let answer: Buffer[] | null = null;
      let answered: (() => void) | null = null;
      const loseAnswer = (then: () => void) => {
        answer = [];
        answered = then;
      };
      client.on('data', (chunk: Buffer) => {
        if (held) return void held.push(chunk);
        if (armed && chunk.includes(name)) {
          const a = armed;
          armed = null;
          if (!a.hold) {
            loseAnswer(a.done);
            return void upstream.write(chunk);
          }
          held = [chunk];
          release = () =>
            new Promise<void>((r) => {
              loseAnswer(r);
              for (const c of held ?? []) upstream.write(c);
              held = null;
            });
          return a.done();
        }
        upstream.write(chunk);
      });
      upstream.on('data', (chunk: Buffer) => {
        if (answer === null) return void client.write(chunk);
        answer.push(chunk);
        if (!Buffer.concat(answer).subarray(-READY.length).equals(READY)) return;
        // Committed on the server; the hub never hears of it.
        client.resetAndDestroy();
        upstream.resetAndDestroy();
        answered?.();
      });
      for (const [a, b] of [[client, upstream], [upstream, client]] as const) {
        a.on('end', () => b.end());
        a.on('error', () => b.destroy());
        a.on('close', () => sockets.delete(a));
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    return {
      port: (server.address() as net.AddressInfo).port,
      resetNextAnswer: () => new Promise<void>((done) => (armed = { hold: false, done })),
      holdNext: () => new Promise<void>((done) => (armed = { hold: true, done })),
      releaseAndReset: () => {
        if (!release) throw new Error('no statement held');
        return release();
      },
      close: () => {
        for (const s of sockets) s.destroy();
        server.close();
      },
    };
  };
}
