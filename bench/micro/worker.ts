/**
 * The micro benchmark inside workerd, where it matters: zod cannot compile its schemas there
 * (no eval), and V8 is workerd's own. Started by bench/micro/validate.ts with wrangler's
 * unstable_startWorker (bench/micro/wrangler.toml); GET /?suite=validate|parts|batch&runs=N&ms=M.
 */
import { batchSuite, partsSuite, validateSuite } from './cases';

export default {
  async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const runs = Number(url.searchParams.get('runs') ?? 7);
    const ms = Number(url.searchParams.get('ms') ?? 150);
    switch (url.searchParams.get('suite')) {
      case 'validate':
        return Response.json(validateSuite(runs, ms));
      case 'batch':
        return Response.json(batchSuite(runs, ms));
      case 'parts':
        return Response.json(partsSuite(runs, ms));
      case 'probe':
        return Response.json({ userAgent: (globalThis as { navigator?: { userAgent?: string } }).navigator?.userAgent ?? null });
      default:
        return new Response('suite=validate|parts|batch|probe', { status: 400 });
    }
  },
};
