// Development mock of the coordinator's REST API (same JSON mapping: snake_case, int64 as
// strings, enum names) plus static serving of web/dist. Not a model: the numbers are made
// up so that the pages have something to draw. Usage: node mock/server.mjs [port] [dist]
// (PARATUNE_MOCK_TOKEN=x makes it answer 401 without `Authorization: Bearer x`).
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';

const port = Number(process.argv[2] ?? 8787);
const dist = process.argv[3] ?? join(fileURLToPath(new URL('.', import.meta.url)), '..', 'dist');
const token = process.env.PARATUNE_MOCK_TOKEN ?? '';

const jobs = new Map();
let nextId = 1;

function fakePlan(spec) {
  const n = Number(spec.cluster?.num_gpus ?? 8);
  const B = Number(spec.training?.global_batch_size ?? 8);
  const capacity = spec.cluster?.gpu === 'a100-40gb' ? 40 : 80;
  const ranked = [];
  const rejected = [];
  let considered = 0;
  for (const tp of [1, 2, 4, 8]) {
    for (const pp of [1, 2, 4, 8, 16, 32]) {
      for (const vp of [1, 2, 3]) {
        for (const mb of [1, 2]) {
          for (const recompute of ['none', 'selective', 'full']) {
            considered++;
            const config = { tp: String(tp), pp: String(pp), vp: String(vp), micro_batch_size: String(mb), recompute, sequence_parallel: tp > 1, distributed_optimizer: true, cp: '1' };
            if (n % (tp * pp)) { rejected.push({ config, reason: `tp*pp (${tp * pp}) must divide num_gpus (${n})` }); continue; }
            const dp = n / (tp * pp);
            config.dp = String(dp);
            if (vp > 1 && pp === 1) { rejected.push({ config, reason: 'virtual pipeline needs pp > 1' }); continue; }
            if (B % (mb * dp)) { rejected.push({ config, reason: `global batch (${B}) must be a multiple of micro_batch * dp (${mb * dp})` }); continue; }
            const weights = 350 / (tp * pp);
            const act = (recompute === 'full' ? 2 : recompute === 'selective' ? 14 : 22) * mb * 8 / tp;
            const peak = weights * (2 + 4) / 2 / 1 + weights * 12 / 2 / dp + act + 3;
            if (peak > capacity) { rejected.push({ config, reason: `peak memory ${peak.toFixed(1)} GiB exceeds capacity ${capacity} GiB` }); continue; }
            const m = B / (mb * dp);
            const compute = 10 * (recompute === 'full' ? 1.33 : recompute === 'selective' ? 1.03 : 1) / (1 + 0.05 * mb);
            const bubble = compute * (pp - 1) / (m * vp);
            const t = { compute, tp_comm: 0.15 * Math.log2(tp + 1), cp_comm: 0, pp_bubble: bubble, pp_p2p: 0.02 * pp * vp, dp_comm: 0.3, optimizer: 0.05 };
            const iter = Object.values(t).reduce((a, b) => a + b, 0);
            const tokens = (B * Number(spec.training?.seq_length ?? 2048)) / iter / n;
            config.recompute_num_layers = recompute === 'full' ? '1' : '0';
            ranked.push({
              config,
              iteration_time_s: iter,
              tokens_per_sec_per_gpu: tokens,
              model_tflops_per_gpu: tokens * 6 * 175e9 / 1e12,
              hardware_tflops_per_gpu: tokens * 6 * 175e9 / 1e12 * 1.1,
              mfu: tokens * 6 * 175e9 / 1e12 / 312,
              memory: { peak_gib: peak, weights: weights, gradients: weights * 2, optimizer: weights * 6 / dp, activations: act, other: 3, capacity_gib: capacity },
              fits: true,
              source: 'modelled',
              time: t,
              notes: [`pipeline bubble ${(100 * bubble / iter).toFixed(1)} % of the iteration`, `${m} micro-batches per iteration`],
            });
          }
        }
      }
    }
  }
  ranked.sort((a, b) => b.tokens_per_sec_per_gpu - a.tokens_per_sec_per_gpu);
  const top = ranked.slice(0, Number(spec.search?.top_k ?? 10)).map((r, i) => ({ rank: String(i + 1), ...r }));
  return { ranked: top, candidates_considered: String(considered), feasible: String(ranked.length), elapsed_ms: 12.5, rejected };
}

function send(res, status, body) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}

function error(res, status, code, name, message) {
  send(res, status, { code, status: name, message });
}

function advance(job) {
  const age = Date.now() - job._created;
  if (job.state === 'JOB_STATE_CANCELLED') return;
  if (age > 2500) job.state = 'JOB_STATE_SUCCEEDED';
  else if (age > 800) job.state = 'JOB_STATE_PLANNING';
  job.update_time = new Date().toISOString();
}

function publicJob(job) {
  const { _created, _plan, ...rest } = job;
  return rest;
}

const MIME = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.svg': 'image/svg+xml', '.json': 'application/json' };

createServer(async (req, res) => {
  const url = new URL(req.url, 'http://x');
  if (url.pathname.startsWith('/v1/')) {
    if (token && req.headers.authorization !== `Bearer ${token}`) return error(res, 401, 16, 'UNAUTHENTICATED', 'missing or wrong bearer token');
    let body = '';
    for await (const chunk of req) body += chunk;
    const m = url.pathname.match(/^\/v1\/jobs\/([^/:]+)(\/results|:cancel)?$/);
    if (req.method === 'POST' && url.pathname === '/v1/jobs') {
      let spec;
      try { spec = JSON.parse(body).spec; } catch { return error(res, 400, 3, 'INVALID_ARGUMENT', 'body is not JSON'); }
      if (!spec?.model?.preset && !spec?.model?.hf_config_json) return error(res, 400, 3, 'INVALID_ARGUMENT', 'model: give a preset or hf_config_json');
      const id = `job-${String(nextId++).padStart(4, '0')}`;
      const now = new Date().toISOString();
      const job = { id, name: spec.name ?? '', state: 'JOB_STATE_PENDING', spec, progress: {}, create_time: now, update_time: now, _created: Date.now(), _plan: fakePlan(spec) };
      jobs.set(id, job);
      return send(res, 200, publicJob(job));
    }
    if (req.method === 'GET' && url.pathname === '/v1/jobs') {
      for (const j of jobs.values()) advance(j);
      return send(res, 200, { jobs: [...jobs.values()].map(publicJob) });
    }
    if (url.pathname === '/v1/catalog') {
      // A few entries in the coordinator's shape (GET /v1/catalog); the real one lists every preset and device.
      const model = (layers, hidden, heads, groups) => ({ num_layers: String(layers), hidden_size: String(hidden), num_attention_heads: String(heads), num_query_groups: String(groups), ffn_hidden_size: String(4 * hidden), vocab_size: '51200', activation: 'gelu' });
      return send(res, 200, {
        presets: [{ name: 'gpt3-175b', model: model(96, 12288, 96, 96) }, { name: 'llama3-8b', model: model(32, 4096, 32, 8) }],
        devices: [{ name: 'a100-80gb', memory_bytes: 80 * 2 ** 30 }, { name: 'h100-sxm-80gb', memory_bytes: 80 * 2 ** 30 }, { name: 'cpu', memory_bytes: 0, host_memory: true }],
        precisions: ['bf16', 'fp16', 'fp8', 'fp32'],
        frameworks: [{ name: 'megatron-core', export_format: 'megatron' }, { name: 'torchtitan', export_format: 'torchtitan' }],
      });
    }
    if (/^\/v1\/jobs\/[^/:]+\/results\/[^/:]*:export$/.test(url.pathname)) {
      return error(res, 501, 12, 'UNIMPLEMENTED', 'the mock does not render exports: the coordinator does (search/exporters.cc)');
    }
    if (url.pathname === '/v1/workers') {
      return send(res, 200, { workers: [{ id: 'w-1', name: 'node-a', backend: 'cpu', device_kind: 'cpu', devices: [{ index: 0, name: 'cpu', memory_bytes: String(24 * 2 ** 30) }], cpu_cores: 2, memory_bytes: String(24 * 2 ** 30), state: 'idle', last_heartbeat_unix_ms: String(Date.now() - 1200) }] });
    }
    if (m) {
      const job = jobs.get(m[1]);
      if (!job) return error(res, 404, 5, 'NOT_FOUND', `job ${m[1]} not found`);
      advance(job);
      if (m[2] === ':cancel' && req.method === 'POST') {
        if (job.state !== 'JOB_STATE_SUCCEEDED') job.state = 'JOB_STATE_CANCELLED';
        return send(res, 200, publicJob(job));
      }
      if (m[2] === '/results') {
        if (job.state !== 'JOB_STATE_SUCCEEDED') return error(res, 400, 9, 'FAILED_PRECONDITION', `job ${job.id} has no results yet`);
        return send(res, 200, { job_id: job.id, state: job.state, plan: job._plan });
      }
      return send(res, 200, publicJob(job));
    }
    return error(res, 404, 5, 'NOT_FOUND', `no route ${req.method} ${url.pathname}`);
  }
  const rel = normalize(url.pathname === '/' ? '/index.html' : url.pathname).replace(/^(\.\.[/\\])+/, '');
  try {
    const data = await readFile(join(dist, rel));
    res.writeHead(200, { 'Content-Type': MIME[extname(rel)] ?? 'application/octet-stream' });
    res.end(data);
  } catch {
    res.writeHead(404, { 'Content-Type': 'text/plain' });
    res.end('not found');
  }
}).listen(port, '127.0.0.1', () => console.log(`mock coordinator on http://127.0.0.1:${port}/ serving ${dist}`));
