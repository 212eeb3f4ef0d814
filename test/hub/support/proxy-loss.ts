/*
 * A request that wrangler's local dev proxy lost, told apart from an answer of the hub.
 */

/**
 * What wrangler's dev proxy (its ProxyWorker, in front of the Worker in local development only)
 * answers, as a plain-text 503, when its own fetch to the Worker fails at the network level. It
 * says "restarted", but with `watch: false` nothing restarts: the proxy takes every such failure
 * of a request to a path other than `/` for a restart (it compares the request's whole URL with
 * the Worker's origin), and does not report it. Seen once in CI, for one of ten concurrent POSTs;
 * the hub never answers it, and a deployment has no such hop.
 */
export const DEV_PROXY_LOSS = 'Your worker restarted mid-request';

export function isProxyLoss(status: number, text: string): boolean {
  return status === 503 && text.startsWith(DEV_PROXY_LOSS);
}

/**
 * Sends a request again (at most twice more) when the dev proxy lost it, for requests that may be
 * sent twice: an idempotent method, or a POST under an Idempotency-Key. Any other answer is returned.
 */
export async function againAfterProxyLoss(send: () => Promise<Response>): Promise<Response> {
  for (let attempt = 0; ; attempt++) {
    const res = await send();
    if (res.status !== 503 || attempt === 2) return res;
    const text = await res.clone().text();
    if (!isProxyLoss(res.status, text)) return res;
  }
}
