import { devNull } from 'node:os';
import path from 'node:path';

/**
 * `envFiles` for wrangler's unstable_startWorker when every binding is the caller's: a path no
 * file can have (under the null device). An empty list is not "none": wrangler then reads
 * `.dev.vars` beside wrangler.toml, and any key in it reached the Worker (a developer's
 * HUB_REGION claimed the database for that region, for good), while it logs that at a level the
 * hub's start hides. A path that cannot be read is only a debug line.
 */
export const NO_ENV_FILES: string[] = [path.join(devNull, 'no-env-file')];
