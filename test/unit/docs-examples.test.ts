/**
 * The operator SDK's examples in README.md and src/operator/README.md are what a newcomer copies
 * first, so they must compile against the SDK as it is: every complete example (a TypeScript
 * block that imports the SDK) is type-checked here with the project's own compiler options. The
 * names an example leaves to the reader (its cluster's state, its CRD helpers) are declared in a
 * prelude; everything it calls on the SDK is checked as written. A block without an import is a
 * fragment (a signature, with `…`) and is not checked.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DOCS = ['README.md', 'src/operator/README.md'];

/** What the examples use without defining: the reader's own state and helpers. */
const PRELUDE = `
import type { ObservedSnapshot as __Snapshot } from './src/operator';
import type { Payload as __Payload } from './src/protocol';
declare const cluster: __Snapshot['cluster'];
declare const nodes: __Snapshot['nodes'];
declare const devices: __Snapshot['devices'];
declare const deployments: __Snapshot['deployments'];
declare const node: __Payload<'node.observed'>;
declare const gpu: __Payload<'device.observed'>;
declare const dep: __Payload<'deployment.observed'>;
declare const id: string;
declare function writeCrd(d: unknown): Promise<void>;
declare function deleteCrdsExcept(keep: unknown): Promise<void>;
declare function isConflictForever(e: unknown): boolean;
declare function cordon(target: string): Promise<void>;
declare function alert(x: unknown): void;
declare function log(x: unknown): void;
export {};
`;

interface Example {
  doc: string;
  line: number;
  code: string;
}

/** Every ```ts block of a document that imports the SDK, with the line it starts on. */
function examplesOf(doc: string, text: string): Example[] {
  const out: Example[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    if (!/^```(ts|typescript)\s*$/.test(lines[i] ?? '')) continue;
    const start = i + 1;
    let end = start;
    while (end < lines.length && !/^```\s*$/.test(lines[end] ?? '')) end++;
    const code = lines.slice(start, end).join('\n');
    if (/^import .* from '\.\/src\/operator';$/m.test(code)) out.push({ doc, line: start + 1, code });
    i = end;
  }
  return out;
}

function compilerOptions(): ts.CompilerOptions {
  const file = path.join(ROOT, 'tsconfig.json');
  const read = ts.readConfigFile(file, (f) => ts.sys.readFile(f));
  if (read.error) throw new Error(ts.flattenDiagnosticMessageText(read.error.messageText, '\n'));
  return ts.parseJsonConfigFileContent(read.config, ts.sys, ROOT).options;
}

/** Type errors of each example, compiled as a file at the repository's root (so './src/operator' resolves). */
function typeErrors(examples: Example[]): Map<Example, string[]> {
  const files = new Map(examples.map((e, i) => [path.join(ROOT, `__docs_example_${i}.ts`), e] as const));
  const options = compilerOptions();
  const host = ts.createCompilerHost(options, true);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, version, onError, create) => {
    const e = files.get(path.resolve(name));
    return e ? ts.createSourceFile(name, `${e.code}\n${PRELUDE}`, version, true) : getSourceFile(name, version, onError, create);
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => files.has(path.resolve(name)) || fileExists(name);
  const program = ts.createProgram([...files.keys()], options, host);
  const out = new Map<Example, string[]>();
  for (const [name, e] of files) {
    const source = program.getSourceFile(name);
    const diagnostics = source ? [...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source)] : [];
    out.set(
      e,
      diagnostics.map((d) => {
        const at = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : null;
        // Lines of the example as the document numbers them.
        const where = at ? `${e.doc}:${e.line + at.line}` : e.doc;
        return `${where}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
      }),
    );
  }
  return out;
}

describe('the operator SDK examples in the documentation', () => {
  const examples = DOCS.flatMap((doc) => examplesOf(doc, readFileSync(path.join(ROOT, doc), 'utf8')));

  it('finds the complete example in each document (a check of nothing would pass)', () => {
    expect(examples.map((e) => e.doc).sort()).toEqual([...DOCS].sort());
  });

  it('type-check against the SDK as it is, with the project\'s strict options', () => {
    const errors = [...typeErrors(examples).values()].flat();
    expect(errors).toEqual([]);
  }, 60_000);

  it('an example that calls the SDK wrongly is reported at its line in the document', () => {
    const wrong: Example = { doc: 'fixture.md', line: 10, code: "import { OperatorClient } from './src/operator';\nnew OperatorClient({ url: 'wss://x' });" };
    const [errors] = [...typeErrors([wrong]).values()];
    expect(errors?.length).toBeGreaterThan(0);
    expect(errors?.[0]).toMatch(/^fixture\.md:11: /);
  }, 60_000);
});
