#!/usr/bin/env node
// Unit test of the dashboard's client-side exports and Pareto frontier (web/src/exports.ts,
// web/src/analysis.ts), bundled with the esbuild that web/node_modules already holds, run
// under node's test runner. Expected texts are written out by hand from Megatron-LM's and
// NeMo's flag names and the rules in the dashboard brief (VP flag = L / (pp * vp)).
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
  console.error(`exports.test: ${ESBUILD} missing; run scripts/build-web.sh (npm ci)`);
  process.exit(1);
}
const out = mkdtempSync(join(tmpdir(), 'paratune-exports-'));
after(() => rmSync(out, { recursive: true, force: true }));
const entry = join(out, 'entry.ts');
const bundle = join(out, 'bundle.mjs');
writeFileSync(entry, `export * from ${JSON.stringify(join(WEB, 'src', 'exports.ts'))};\nexport * from ${JSON.stringify(join(WEB, 'src', 'analysis.ts'))};\n`);
execFileSync(ESBUILD, [entry, '--bundle', '--format=esm', '--platform=node', `--outfile=${bundle}`, '--log-level=warning']);
const { megatronArgs, nemoConfig, jsonExport, resolveNumLayers, paretoFrontier } = await import(pathToFileURL(bundle).href);

const gptJob = {
  id: 'job-7',
  spec: {
    model: { preset: 'gpt3-175b' },
    training: { seq_length: '2048', global_batch_size: '1536' },
    cluster: { gpu: 'a100-80gb', num_gpus: '1024', gpus_per_node: '8' },
  },
};
const layout = (config, extra = {}) => ({
  rank: '3',
  config,
  iteration_time_s: 16.5,
  tokens_per_sec_per_gpu: 186.2,
  mfu: 0.6321,
  memory: { peak_gib: 70.25 },
  ...extra,
});
const flags = (text) => text.split('\n').filter((l) => l.startsWith('--')).map((l) => l.replace(/ \\$/, ''));

test('Megatron: interleaved, SP, full recompute, distributed optimizer', () => {
  const text = megatronArgs({
    job: gptJob,
    ranked: layout({ tp: '8', pp: '4', dp: '32', cp: '1', vp: '12', micro_batch_size: '4', sequence_parallel: true, recompute: 'full', recompute_num_layers: '2', distributed_optimizer: true }),
  });
  assert.deepEqual(flags(text), [
    '--tensor-model-parallel-size 8',
    '--pipeline-model-parallel-size 4',
    '--num-layers-per-virtual-pipeline-stage 2', // 96 / (4 * 12)
    '--context-parallel-size 1',
    '--sequence-parallel',
    '--micro-batch-size 4',
    '--global-batch-size 1536',
    '--seq-length 2048',
    '--num-layers 96',
    '--recompute-granularity full',
    '--recompute-method uniform',
    '--recompute-num-layers 2',
    '--use-distributed-optimizer',
    '--bf16',
  ]);
  // Every line but the last continues the shell command.
  const lines = text.trim().split('\n').filter((l) => l.startsWith('--'));
  assert.ok(lines.slice(0, -1).every((l) => l.endsWith(' \\')) && !lines.at(-1).endsWith('\\'));
  assert.match(text, /^# .*MFU 63\.2 %/m);
});

test('Megatron: no VP flag at vp 1, selective recompute, CP, fp8, defaults for omitted fields', () => {
  const job = { ...gptJob, spec: { ...gptJob.spec, training: { ...gptJob.spec.training, precision: 'fp8' } } };
  const text = megatronArgs({ job, ranked: layout({ tp: '4', pp: '2', dp: '64', cp: '2', recompute: 'selective' }) });
  assert.deepEqual(flags(text), [
    '--tensor-model-parallel-size 4',
    '--pipeline-model-parallel-size 2',
    '--context-parallel-size 2',
    '--micro-batch-size 1',
    '--global-batch-size 1536',
    '--seq-length 2048',
    '--num-layers 96',
    '--recompute-granularity selective',
    '--bf16',
    '--fp8-format hybrid',
  ]);
});

test('Megatron: vp > 1 with an unknown layer count says so instead of guessing', () => {
  const job = { id: 'j', spec: { model: { preset: 'my-private-model' }, training: { global_batch_size: '64' }, cluster: { num_gpus: '16' } } };
  const text = megatronArgs({ job, ranked: layout({ tp: '2', pp: '4', dp: '2', vp: '3' }) });
  assert.ok(!flags(text).some((f) => f.startsWith('--num-layers-per-virtual-pipeline-stage')), text);
  assert.match(text, /^# virtual pipeline size 3: set --num-layers-per-virtual-pipeline-stage to num_layers \/ 12/m);
});

test('layer count: explicit field, then HF config, then preset table', () => {
  assert.equal(resolveNumLayers({ model: { preset: 'gpt3-175b', num_layers: '40' } }), 40);
  assert.equal(resolveNumLayers({ model: { hf_config_json: '{"num_hidden_layers": 32}' } }), 32);
  assert.equal(resolveNumLayers({ model: { hf_config_json: '{"n_layer": 70}' } }), 70);
  assert.equal(resolveNumLayers({ model: { preset: 'llama3.1-405b' } }), 126);
  assert.equal(resolveNumLayers({ model: { preset: 'unknown' } }), 0);
});

test('NeMo: trainer nodes and devices, model parallel keys', () => {
  const yaml = nemoConfig({
    job: gptJob,
    ranked: layout({ tp: '8', pp: '8', dp: '16', cp: '1', vp: '3', micro_batch_size: '1', sequence_parallel: true, recompute: 'none', distributed_optimizer: false }),
  });
  for (const line of [
    'trainer:',
    '  num_nodes: 128',
    '  devices: 8',
    '  precision: bf16-mixed',
    'model:',
    '  micro_batch_size: 1',
    '  global_batch_size: 1536',
    '  encoder_seq_length: 2048',
    '  num_layers: 96',
    '  tensor_model_parallel_size: 8',
    '  pipeline_model_parallel_size: 8',
    '  virtual_pipeline_model_parallel_size: 3',
    '  context_parallel_size: 1',
    '  sequence_parallel: true',
    '  activations_checkpoint_granularity: null',
    '  activations_checkpoint_method: null',
    '    name: fused_adam',
  ]) {
    assert.ok(yaml.split('\n').includes(line), `missing line "${line}" in\n${yaml}`);
  }
});

test('JSON export round-trips the layout and the spec', () => {
  const ranked = layout({ tp: '2', pp: '1', dp: '4' });
  const parsed = JSON.parse(jsonExport({ job: gptJob, ranked }));
  assert.deepEqual(parsed, { job_id: 'job-7', spec: gptJob.spec, layout: ranked });
});

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
