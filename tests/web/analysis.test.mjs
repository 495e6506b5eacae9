#!/usr/bin/env node
// Unit test of the dashboard's Pareto frontier (web/src/analysis.ts), bundled with the
// esbuild that web/node_modules already holds, run under node's test runner. (Exports are
// rendered by the coordinator; tests/web/dashboard.test.mjs compares them with the CLI.)
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath, pathToFileURL } from 'node:url';

const WEB = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'web');
const ESBUILD = join(WEB, 'node_modules', '.bin', 'esbuild');
if (!existsSync(ESBUILD)) {
  console.error(`analysis.test: ${ESBUILD} missing; run scripts/build-web.sh (npm ci)`);
  process.exit(1);
}
const out = mkdtempSync(join(tmpdir(), 'paratune-analysis-'));
after(() => rmSync(out, { recursive: true, force: true }));
const entry = join(out, 'entry.ts');
const bundle = join(out, 'bundle.mjs');
writeFileSync(entry, `export * from ${JSON.stringify(join(WEB, 'src', 'analysis.ts'))};\n`);
execFileSync(ESBUILD, [entry, '--bundle', '--format=esm', '--platform=node', `--outfile=${bundle}`, '--log-level=warning']);
const { paretoFrontier } = await import(pathToFileURL(bundle).href);

test('Pareto frontier: dominated points dropped, ties keep the faster one', () => {
  const pts = [
    { index: 0, memory: 60, throughput: 180 },
    { index: 1, memory: 40, throughput: 170 },
    { index: 2, memory: 50, throughput: 165 }, // dominated by 1
    { index: 3, memory: 70, throughput: 190 },
    { index: 4, memory: 40, throughput: 172 }, // same memory as 1, faster
    { index: 5, memory: 75, throughput: 185 }, // dominated by 3
  ];
  assert.deepEqual(paretoFrontier(pts).map((p) => p.index), [4, 0, 3]);
  assert.deepEqual(paretoFrontier([]), []);
});
