import type { Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';

/** Every HTTP failure is a typed JSON body: `{"error": {"code", "message", "field"?}}`. */
export interface ErrorBody {
  error: { code: string; message: string; field?: string };
}

export function jsonError(c: Context, status: ContentfulStatusCode, code: string, message: string, field?: string): Response {
  const body: ErrorBody = { error: { code, message, ...(field ? { field } : {}) } };
  return c.json(body, status);
}
