/**
 * The headless Chromium the browser tests drive: the @sparticuz/chromium npm package's, which
 * unpacks itself under the temp directory on first use, or a system /usr/bin/chromium when the
 * packaged one cannot be had.
 *
 * The package checks only that its binary's path exists before returning it, while it writes the
 * binary, its fonts and its GL library in parallel streams. Two test files asking at once on a
 * fresh machine raced: one launched the binary the other was still writing (`spawn ETXTBSY`).
 * So the run's global setup unpacks it once, before any test file starts (test/support/global-setup.ts).
 */
import { existsSync } from 'node:fs';
import chromium from '@sparticuz/chromium';

export async function chromiumExecutable(): Promise<string> {
  try {
    return await chromium.executablePath();
  } catch (err) {
    if (!existsSync('/usr/bin/chromium')) throw err;
    return '/usr/bin/chromium';
  }
}

/** The package's serverless defaults include --disable-web-security; a user's browser has its same-origin policy, and so must the one that tests the page. */
export function chromiumArgs(): string[] {
  return chromium.args.filter((a) => a !== '--disable-web-security');
}
