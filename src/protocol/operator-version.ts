/**
 * hello.operator_version against the plane's release line. A release-shaped version (`0.4.2`,
 * `v0.4.2`) in another major is refused: a different major may change what a frame means. A
 * version that is not release-shaped (`dev`, a commit) is a build from source: admitted, and
 * the hub logs it.
 */
const RELEASE_RE = /^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$/;

export type VersionVerdict =
  | { admitted: true; release: true; major: number }
  | { admitted: true; release: false }
  | { admitted: false; reason: string };

/** The major of a release-shaped version, or null when the version is not release-shaped. */
export function releaseMajor(version: string): number | null {
  const m = RELEASE_RE.exec(version);
  return m ? Number(m[1]) : null;
}

export function checkOperatorVersion(operatorVersion: string, planeVersion: string): VersionVerdict {
  const planeMajor = releaseMajor(planeVersion);
  if (planeMajor === null) throw new Error(`plane release line ${JSON.stringify(planeVersion)} is not release-shaped`);
  const major = releaseMajor(operatorVersion);
  if (major === null) return { admitted: true, release: false };
  if (major !== planeMajor) {
    return {
      admitted: false,
      reason: `operator version ${operatorVersion} is major ${major}; this plane speaks major ${planeMajor}`,
    };
  }
  return { admitted: true, release: true, major };
}
