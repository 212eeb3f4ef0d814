import { describe, expect, it } from 'vitest';
import { orderFiles, PROJECT_ORDER } from '../support/file-order';

const f = (project: string, file: string, size = 100) => ({ project, file, size });

describe("the suite's file order", () => {
  it('keeps each project together, projects in PROJECT_ORDER, whatever order vitest found them in', () => {
    const files = [f('unit', 'test/unit/a.test.ts'), f('hub', 'test/hub/b.test.ts'), f('workers', 'test/workers/c.test.ts'), f('unit', 'test/unit/d.test.ts'), f('hub', 'test/hub/e.test.ts')];
    const projects = orderFiles(files, {}).map((x) => x.project);
    expect(projects).toEqual(['workers', 'hub', 'hub', 'unit', 'unit']);
    expect(PROJECT_ORDER.indexOf('workers')).toBeLessThan(PROJECT_ORDER.indexOf('unit'));
  });

  it("starts a project's longest recorded file first, not its largest", () => {
    const files = [f('hub', 'test/hub/short-big.test.ts', 90_000), f('hub', 'test/hub/long-small.test.ts', 1_000), f('hub', 'test/hub/mid.test.ts', 5_000)];
    const order = orderFiles(files, { 'test/hub/short-big.test.ts': 3, 'test/hub/long-small.test.ts': 70, 'test/hub/mid.test.ts': 20 });
    expect(order.map((x) => x.file)).toEqual(['test/hub/long-small.test.ts', 'test/hub/mid.test.ts', 'test/hub/short-big.test.ts']);
  });

  it("gives a file with no record its project's median, so a new file neither leads nor trails by default (a tie goes to the larger)", () => {
    const files = [f('hub', 'test/hub/new.test.ts', 1_000), f('hub', 'test/hub/a.test.ts'), f('hub', 'test/hub/b.test.ts'), f('hub', 'test/hub/c.test.ts')];
    const order = orderFiles(files, { 'test/hub/a.test.ts': 50, 'test/hub/b.test.ts': 10, 'test/hub/c.test.ts': 2 });
    expect(order.map((x) => x.file)).toEqual(['test/hub/a.test.ts', 'test/hub/new.test.ts', 'test/hub/b.test.ts', 'test/hub/c.test.ts']);
  });

  it('orders by size, largest first, where nothing is recorded, and puts an unknown project last', () => {
    const files = [f('other', 'test/other/x.test.ts', 10), f('unit', 'test/unit/s.test.ts', 10), f('unit', 'test/unit/l.test.ts', 900)];
    expect(orderFiles(files, {}).map((x) => x.file)).toEqual(['test/unit/l.test.ts', 'test/unit/s.test.ts', 'test/other/x.test.ts']);
  });
});
