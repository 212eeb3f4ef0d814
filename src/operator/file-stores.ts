import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { FileCursorStore } from './cursor-store';
import { FileOutboundLog, type FileOutboundLogOptions } from './outbound-log';

/**
 * The durable pair an operator keeps in one directory beside its cluster state:
 * `cursor.json` (session, cursor, numbering, operations) and `outbound.log` (sent frames until
 * acknowledged). Both or neither: a cursor without its log would say lossy after every crash.
 */
export async function openFileStores(
  dir: string,
  options: FileOutboundLogOptions = {},
): Promise<{ cursorStore: FileCursorStore; outboundLog: FileOutboundLog }> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  return {
    cursorStore: new FileCursorStore(path.join(dir, 'cursor.json')),
    outboundLog: await FileOutboundLog.open(path.join(dir, 'outbound.log'), options),
  };
}
