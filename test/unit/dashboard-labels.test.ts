/**
 * The GPU chart's bar labels (src/hub/dashboard/static/charts.js). Model names are the
 * operator's to choose; a long one is cut with an ellipsis, and the cut must fall between
 * characters as a reader sees them, never inside one.
 */
import { describe, expect, it } from 'vitest';
// @ts-expect-error: the dashboard's browser modules are plain JS checked by their own tsconfig.
import { clipLabel } from '../../src/hub/dashboard/static/charts.js';

const clip = clipLabel as (text: string, max?: number) => string;
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

describe("the GPU chart's bar labels", () => {
  it('leaves a name of up to 26 characters whole, and cuts a longer one to 25 and an ellipsis', () => {
    expect(clip('NVIDIA-H100-80GB-HBM3')).toBe('NVIDIA-H100-80GB-HBM3');
    expect(clip('x'.repeat(26))).toBe('x'.repeat(26));
    expect(clip('x'.repeat(27))).toBe(`${'x'.repeat(25)}…`);
  });

  it('never splits an emoji into a lone surrogate', () => {
    // 24 ASCII letters, then emoji: UTF-16 index 25 falls inside the second code unit pair.
    const name = `${'a'.repeat(24)}🚀🚀🚀🚀`;
    const label = clip(name);
    expect(label).not.toMatch(loneSurrogate);
    expect(label).toBe(`${'a'.repeat(24)}🚀…`);
  });

  it('counts a flag, a skin-toned emoji and a letter with a combining accent as one character each', () => {
    const flag = '🇯🇵';
    const wave = '👋🏽';
    const e = 'e\u0301';
    expect(clip(`${flag}${wave}${e}`, 3)).toBe(`${flag}${wave}${e}`);
    expect(clip(`${flag.repeat(30)}`)).toBe(`${flag.repeat(25)}…`);
    expect(clip(`${wave.repeat(30)}`)).toBe(`${wave.repeat(25)}…`);
    expect(clip(`${e.repeat(30)}`)).toBe(`${e.repeat(25)}…`);
  });
});
