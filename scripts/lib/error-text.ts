/**
 * What went wrong, as one line. Not only an Error's message: the Neon driver rejects a failed
 * connect with the `ws` library's ErrorEvent as it is (not an Error), which `String()` prints as
 * "[object Object]"; its cause is in `.error` (or `.message`).
 */
export function errorText(err: unknown): string {
  if (err instanceof Error) return err.message;
  if (typeof err === 'object' && err !== null) {
    const e = err as { message?: unknown; error?: unknown };
    if (e.error instanceof Error && e.error.message) return e.error.message;
    if (typeof e.message === 'string' && e.message) return e.message;
  }
  return String(err);
}
