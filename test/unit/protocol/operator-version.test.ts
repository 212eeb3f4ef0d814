import { describe, expect, it } from 'vitest';
import { checkOperatorVersion, releaseMajor } from '../../../src/protocol';

describe('operator version check', () => {
  it('major is the first number of the release: 0.4.2 is major 0, v1.2.3 is major 1', () => {
    expect(releaseMajor('0.4.2')).toBe(0);
    expect(releaseMajor('v1.2.3')).toBe(1);
    expect(releaseMajor('12.0.0-rc.1+build.5')).toBe(12);
  });

  it('a release-shaped version in the plane major is admitted', () => {
    expect(checkOperatorVersion('0.4.2', '0.1.0')).toEqual({ admitted: true, release: true, major: 0 });
    expect(checkOperatorVersion('v0.9.0', '0.1.0')).toMatchObject({ admitted: true, release: true });
  });

  it('a release-shaped version outside the plane major is refused', () => {
    const v = checkOperatorVersion('1.0.0', '0.1.0');
    expect(v.admitted).toBe(false);
    expect(checkOperatorVersion('v2.3.4', '1.0.0').admitted).toBe(false);
  });

  it('a version that is not release-shaped (dev, a commit) is a source build: admitted, flagged for a log line', () => {
    for (const v of ['dev', '3f9c2ab', '1.2', 'v01.2.3', 'latest']) {
      expect(checkOperatorVersion(v, '0.1.0')).toEqual({ admitted: true, release: false });
    }
  });
});
