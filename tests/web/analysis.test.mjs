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
writeFileSync(
  entry,
  `export * from ${JSON.stringify(join(WEB, 'src', 'analysis.ts'))};\n` +
    `export { layoutLabel } from ${JSON.stringify(join(WEB, 'src', 'format.ts'))};\n`,
);
execFileSync(ESBUILD, [entry, '--bundle', '--format=esm', '--platform=node', `--outfile=${bundle}`, '--log-level=warning']);
const { paretoFrontier, layoutLabel } = await import(pathToFileURL(bundle).href);

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

test('Layout labels name the expert layout and the sharding stage', () => {
  // A dense layout: no expert fields; int64 fields arrive as strings in the proto JSON.
  assert.equal(
    layoutLabel({ tp: 8, pp: '4', dp: 2, micro_batch_size: 1, sequence_parallel: true, recompute: 'selective', data_parallel_sharding: 'optimizer' }),
    'TP8 PP4 DP2 mb1 SP selective-rc dist-opt',
  );
  // An MoE layout: EP and ETP after the dense dimensions, a non-default dispatcher named.
  assert.equal(
    layoutLabel({ tp: 2, pp: 8, dp: 32, ep: '32', etp: 1, moe_token_dispatcher: 'flex', micro_batch_size: 1, data_parallel_sharding: 'full', shard_group_size: 8 }),
    'TP2 PP8 DP32 EP32 flex mb1 FSDP/8',
  );
  assert.equal(layoutLabel({ tp: 1, ep: 8, etp: 2, moe_token_dispatcher: 'alltoall' }), 'TP1 PP1 DP1 EP8 ETP2 mb1');
  assert.equal(
    layoutLabel({ tp: 2, dp: 4, sequence_parallel: true, tp_comm_overlap: true, data_parallel_sharding: 'full', offload: 'optimizer_and_params' }),
    'TP2 PP1 DP4 mb1 SP FSDP offload+params TP-overlap');
  assert.equal(layoutLabel({ dp: 4, data_parallel_sharding: 'optimizer', offload: 'optimizer' }), 'TP1 PP1 DP4 mb1 dist-opt offload');
});
