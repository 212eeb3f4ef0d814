/**
 * `work`'s outcome, or `late()`'s (its value, or what it throws) when `work` has not settled
 * within `ms`. The timer is cleared either way, and a `work` that loses still settles on its own
 * (the race holds the handler it needs: a late failure is not an unhandled rejection).
 *
 * Written here rather than taken from a package: the ones that fit probe the promise they wrap
 * for a `cancel` method, and on a Durable Object's RPC promise any property is a pipelined call
 * to the remote object.
 */
export async function withDeadline<T, L>(work: Promise<T>, ms: number, late: () => L): Promise<T | L> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<L>((resolve, reject) => {
    timer = setTimeout(() => {
      try {
        resolve(late());
      } catch (err) {
        reject(err);
      }
    }, ms);
  });
  try {
    return await Promise.race([work, deadline]);
  } finally {
    clearTimeout(timer);
  }
}
