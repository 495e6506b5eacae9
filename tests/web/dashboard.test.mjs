#!/usr/bin/env node
// Browser test of the web dashboard (web/dist) against a real paratune-coordinator:
// Debian's Chromium driven by playwright-core (no browser download). It starts the
// coordinator on free ports with a temporary database and --dashboard-dir web/dist,
// submits GPT-3 175B on 1024 x A100-80GB through the form, waits for SUCCEEDED, and
// checks the page against the REST API's own answer: the ranked table and its sorting,
// the scatter (one point per ranked layout, the Pareto frontier recomputed here), a
// layout's breakdown, the Megatron and NeMo exports (served by the coordinator; the
// downloads must equal `paratune export` for the same spec and rank, byte for byte), the
// catalog behind the form's choices, an inference job submitted through the form's serving
// preset (its ranked table, Pareto chart with the limit line, breakdowns and rejected layouts
// against GET .../results), the workers page, keyboard reach,
// text contrast, and no horizontal overflow at 1280 and 400 pixels wide. Screenshots go
// to $PARATUNE_SCREENSHOT_DIR (default build/web-screenshots).
//
// Environment: PARATUNE_BIN_DIR (paratune-coordinator), PARATUNE_WEB_DIST (web/dist),
// PARATUNE_SCREENSHOT_DIR, PARATUNE_CHROMIUM (default /usr/bin/chromium),
// PARATUNE_WEB_MOCK=1 runs against web/mock/server.mjs instead (development only).
// Exit codes: 0 all passed, 1 a check failed or a prerequisite is missing, 77 skipped
// (only when the coordinator binary itself says UNIMPLEMENTED).
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const WEB = join(SRC, 'web');
const DIST = resolve(process.env.PARATUNE_WEB_DIST ?? join(WEB, 'dist'));
const BIN = resolve(process.env.PARATUNE_BIN_DIR ?? join(SRC, 'build', 'bin'));
const SHOTS = resolve(process.env.PARATUNE_SCREENSHOT_DIR ?? join(SRC, 'build', 'web-screenshots'));
const CHROMIUM = process.env.PARATUNE_CHROMIUM ?? '/usr/bin/chromium';
const MOCK = process.env.PARATUNE_WEB_MOCK === '1';
const SKIP = 77;

function die(message) {
  console.error(`dashboard.test: ${message}`);
  process.exit(1);
}

// --- prerequisites, each failing with what to do
if (!existsSync(join(DIST, 'index.html'))) {
  die(`${DIST}/index.html is missing: the dashboard is not built; run scripts/build-web.sh`);
}
let chromium;
try {
  const require = createRequire(join(WEB, 'package.json'));
  ({ chromium } = require('playwright-core'));
} catch (e) {
  die(`cannot load playwright-core from ${WEB}/node_modules (${e.message}); run scripts/build-web.sh (npm ci)`);
}
if (!existsSync(CHROMIUM)) die(`${CHROMIUM} not found: install Debian's chromium (scripts/install-deps.sh)`);
const COORDINATOR = join(BIN, 'paratune-coordinator');
const CLI = join(BIN, 'paratune');
if (!MOCK && !existsSync(COORDINATOR)) die(`${COORDINATOR} not found: build the project first (scripts/build.sh)`);

// --- tiny test runner: prints one line per check and a closing "N passed, N failed"
let passed = 0;
let failed = 0;
async function check(name, fn) {
  const start = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok   ${name} (${Date.now() - start} ms)`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}
function assert(cond, message) {
  if (!cond) throw new Error(message);
}
function assertEq(actual, expected, what) {
  if (actual !== expected) throw new Error(`${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const n = (v, d = 0) => (v === undefined || v === null || v === '' ? d : Number(v));

async function freePort() {
  return new Promise((resolvePort, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolvePort(port));
    });
  });
}

// --- the server under test
const tmp = mkdtempSync(join(tmpdir(), 'paratune-web-'));
// The coordinator runs with a client token: the page must ask for it on 401.
const TOKEN = `web-test-${process.pid}-${Date.now()}`;
writeFileSync(join(tmp, 'client.token'), `${TOKEN}\n`);
let server;
let serverLog = '';
let exited = null;
let worker = null;
// The coordinator binds port 0 (the kernel picks free ports) and writes them to a port
// file: a port picked here and closed again could be taken by another test running in
// parallel before the coordinator binds it.
let httpPort = 0;
let grpcPort = 0;
const PORT_FILE = join(tmp, 'ports');
if (MOCK) {
  httpPort = await freePort();
  server = spawn(process.execPath, [join(WEB, 'mock', 'server.mjs'), String(httpPort), DIST], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, PARATUNE_MOCK_TOKEN: TOKEN },
  });
} else {
  server = spawn(
    COORDINATOR,
    [
      '--bind', '127.0.0.1',
      '--grpc-port', '0',
      '--http-port', '0',
      '--port-file', PORT_FILE,
      '--db', join(tmp, 'paratune.db'),
      '--dashboard-dir', DIST,
      '--client-token-file', join(tmp, 'client.token'),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
}
server.stdout.on('data', (d) => (serverLog += d));
server.stderr.on('data', (d) => (serverLog += d));
server.on('exit', (code, signal) => (exited = { code, signal }));
const AUTH = { Authorization: `Bearer ${TOKEN}` };
let BASE = `http://127.0.0.1:${httpPort}`;

function cleanup() {
  if (worker && workerExited === null) worker.kill('SIGTERM');
  if (server && exited === null) server.kill('SIGTERM');
  rmSync(tmp, { recursive: true, force: true });
}
process.on('exit', cleanup);

async function waitReady() {
  // Generous: CI runs this next to other tests on two loaded cores.
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    if (exited !== null) {
      if (/UNIMPLEMENTED/.test(serverLog)) {
        console.log(`SKIP: paratune-coordinator says it is not built yet: ${serverLog.trim().split('\n')[0]}`);
        cleanup();
        process.exit(SKIP);
      }
      die(`the server exited (${JSON.stringify(exited)}) before serving:\n${serverLog}`);
    }
    if (!MOCK && httpPort === 0) {
      // "GRPC HTTP\n", written once both servers listen.
      const ports = existsSync(PORT_FILE) ? readFileSync(PORT_FILE, 'utf8') : '';
      const m = ports.match(/^(\d+) (\d+)\n/);
      if (!m) {
        await sleep(100);
        continue;
      }
      grpcPort = Number(m[1]);
      httpPort = Number(m[2]);
      BASE = `http://127.0.0.1:${httpPort}`;
    }
    try {
      const res = await fetch(`${BASE}/v1/jobs`, { headers: AUTH });
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  die(`the server did not answer GET /v1/jobs within 120 s:\n${serverLog}`);
}
await waitReady();
console.log(`server ready on ${BASE} (${MOCK ? 'mock' : COORDINATOR})`);

// One CPU worker registers with the coordinator, so the workers page has a row to show.
const WORKER = join(BIN, 'paratune-worker');
const WORKER_NAME = `web-test-worker-${process.pid}`;
let workerExited = null;
if (!MOCK && existsSync(WORKER)) {
  worker = spawn(WORKER, ['--coordinator', `127.0.0.1:${grpcPort}`, '--backend', 'cpu', '--devices', '0-1', '--name', WORKER_NAME], { stdio: ['ignore', 'pipe', 'pipe'] });
  worker.stdout.on('data', (d) => (serverLog += d));
  worker.stderr.on('data', (d) => (serverLog += d));
  worker.on('exit', (code, signal) => (workerExited = { code, signal }));
}

// What `paratune export SPEC --format FORMAT --rank RANK` prints for `spec` (the bytes).
function cliExport(spec, format, rank) {
  assert(existsSync(CLI), `${CLI} not found: build the project first`);
  const file = join(tmp, `export-spec-${format}-${rank}-${Date.now()}.json`);
  writeFileSync(file, JSON.stringify(spec));
  return execFileSync(CLI, ['export', file, '--format', format, '--rank', String(rank)], { stdio: ['ignore', 'pipe', 'pipe'] });
}

// Clicks an export button and returns the downloaded file's bytes and suggested name.
async function downloadOf(selector) {
  const [download] = await Promise.all([page.waitForEvent('download'), page.click(selector)]);
  return { bytes: readFileSync(await download.path()), name: download.suggestedFilename() };
}

function assertSameBytes(actual, expected, what) {
  if (!Buffer.from(actual).equals(Buffer.from(expected))) {
    throw new Error(`${what}: the bytes differ\n--- dashboard\n${actual.toString()}\n--- paratune export\n${expected.toString()}`);
  }
}

async function api(path) {
  const res = await fetch(`${BASE}${path}`, { headers: AUTH });
  const body = await res.json();
  if (!res.ok) throw new Error(`GET ${path}: HTTP ${res.status} ${JSON.stringify(body)}`);
  return body;
}

// Submits `spec` (proto JSON) through POST /v1/jobs and waits for the job to end; fails
// unless it SUCCEEDED. Returns the job id.
async function submitAndWait(spec, what) {
  const res = await fetch(`${BASE}/v1/jobs`, {
    method: 'POST',
    headers: { ...AUTH, 'Content-Type': 'application/json' },
    body: JSON.stringify({ spec }),
  });
  const job = await res.json();
  assertEq(res.status, 200, `POST /v1/jobs (${what}): ${JSON.stringify(job)}`);
  let state = job.state;
  // A deadline, not a count of polls: each poll takes longer on a loaded machine.
  const deadline = Date.now() + 180_000;
  while (!['JOB_STATE_SUCCEEDED', 'JOB_STATE_FAILED', 'JOB_STATE_CANCELLED'].includes(state) && Date.now() < deadline) {
    await sleep(100);
    state = (await api(`/v1/jobs/${job.id}`)).state;
  }
  assertEq(state, 'JOB_STATE_SUCCEEDED', `${what} job state`);
  return job.id;
}

// --- the browser (playwright's launch gives it a new, empty profile directory)
mkdirSync(SHOTS, { recursive: true });
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-background-networking',
    '--disable-component-update',
    '--no-first-run',
    '--disable-sync',
    '--disable-quic',
  ],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, acceptDownloads: true });
const page = await context.newPage();
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(String(e)));
page.on('console', (m) => {
  // Chromium logs every 4xx it gets; the test provokes 401 (token prompt) and 400 (bad spec).
  if (m.type() === 'error' && !/Failed to load resource: .*status of 40[01]/.test(m.text())) pageErrors.push(`console: ${m.text()}`);
});
// Generous: CI runs this next to other tests on two loaded cores.
page.setDefaultTimeout(60_000);

/** Submits a profile job for an uploaded Hugging Face config on 2 CPU ranks (fp32) through
 *  the submit form; returns the id the page navigated to. */
async function submitCpuProfileJob(config, { name, seq, batch, topK }) {
  await page.goto(`${BASE}/#/jobs`);
  await page.check('#source-hf');
  await page.setInputFiles('#hf-config', { name: 'config.json', mimeType: 'application/json', buffer: Buffer.from(config) });
  await page.fill('#job-name', name);
  await page.fill('#seq-length', seq);
  await page.fill('#global-batch', batch);
  await page.selectOption('#precision', 'fp32');
  await page.selectOption('#gpu', 'cpu');
  await page.fill('#num-gpus', '2');
  await page.fill('#gpus-per-node', '2');
  await page.selectOption('#mode', 'profile');
  if (topK) await page.fill('#top-k', topK);
  const before = await page.evaluate(() => location.hash);
  await page.click('#submit-job');
  await page.waitForFunction((prev) => /^#\/jobs\/.+/.test(location.hash) && location.hash !== prev, before);
  return decodeURIComponent((await page.evaluate(() => location.hash)).replace('#/jobs/', ''));
}

/** Every page must fit its width: no horizontal scroll on the document. */
async function horizontalOverflow() {
  return page.evaluate(() => ({
    viewport: window.innerWidth,
    body: document.body.scrollWidth,
    doc: document.documentElement.scrollWidth,
  }));
}

/** WCAG contrast ratio of each matched element's text against its effective background. */
async function contrastOf(selectors) {
  return page.evaluate((sels) => {
    const parse = (c) => {
      const m = c.match(/rgba?\(([^)]+)\)/);
      if (!m) return null;
      const [r, g, b, a = 1] = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
      return { r, g, b, a };
    };
    const lum = ({ r, g, b }) => {
      const f = (v) => {
        const s = v / 255;
        return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
      };
      return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    const background = (el) => {
      for (let e = el; e; e = e.parentElement) {
        const c = parse(getComputedStyle(e).backgroundColor);
        if (c && c.a > 0.5) return c;
      }
      return { r: 255, g: 255, b: 255, a: 1 };
    };
    const out = [];
    for (const sel of sels) {
      const el = document.querySelector(sel);
      if (!el) {
        out.push({ sel, missing: true });
        continue;
      }
      const fg = parse(getComputedStyle(el).color);
      const bg = background(el);
      const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
      out.push({ sel, ratio: (hi + 0.05) / (lo + 0.05), fg: getComputedStyle(el).color, text: el.textContent.trim().slice(0, 30) });
    }
    return out;
  }, selectors);
}

function assertContrast(results) {
  for (const r of results) {
    assert(!r.missing, `contrast: no element matches ${r.sel}`);
    assert(r.ratio >= 4.5, `contrast of ${r.sel} ("${r.text}", ${r.fg}) is ${r.ratio.toFixed(2)} < 4.5`);
  }
}

const SPEC = { preset: 'gpt3-175b', gpu: 'a100-80gb', gpus: 1024, seq: 2048, batch: 1536 };
let jobId = '';
let results = null;

try {
  await check('a 401 opens the token prompt; the token is kept in sessionStorage', async () => {
    const unauth = await fetch(`${BASE}/v1/jobs`);
    assertEq(unauth.status, 401, 'GET /v1/jobs without a token');
    await page.goto(`${BASE}/`);
    await page.waitForSelector('#token-dialog[open]');
    assert((await page.textContent('#token-reason')).includes('401'), 'the prompt says why');
    await page.screenshot({ path: join(SHOTS, 'token-prompt-1280.png') });
    await page.fill('#token-input', TOKEN);
    await page.click('#token-form button[value="save"]');
    await page.waitForSelector('#token-dialog', { state: 'hidden' });
    assertEq(await page.evaluate(() => sessionStorage.getItem('paratune.token')), TOKEN, 'sessionStorage token');
  });

  await check('jobs page loads from the coordinator at 1280x800', async () => {
    await page.waitForSelector('#submit-form');
    assertEq(await page.textContent('main h1'), 'Jobs', 'page heading');
    await page.waitForSelector('#jobs-table tbody tr');
    const o = await horizontalOverflow();
    assert(o.doc <= o.viewport && o.body <= o.viewport, `horizontal overflow at 1280: ${JSON.stringify(o)}`);
    await page.screenshot({ path: join(SHOTS, 'jobs-1280.png') });
  });

  await check('keyboard: Tab reaches every form field and the submit button', async () => {
    await page.focus('body');
    await page.evaluate(() => document.activeElement && document.activeElement.blur());
    const reached = new Set();
    for (let i = 0; i < 40; i++) {
      await page.keyboard.press('Tab');
      const id = await page.evaluate(() => document.activeElement && document.activeElement.id);
      if (id) reached.add(id);
      if (id === 'submit-job') break;
    }
    for (const id of ['source-preset', 'preset', 'seq-length', 'global-batch', 'precision', 'framework', 'gpu', 'num-gpus', 'gpus-per-node', 'mode', 'top-k', 'submit-job']) {
      assert(reached.has(id), `Tab never reached #${id} (reached: ${[...reached].join(', ')})`);
    }
  });

  await check('contrast >= 4.5 on the jobs page (heading, labels, hints, primary button, nav)', async () => {
    assertContrast(await contrastOf(['main h1', '.field label', '.hint', 'button.primary', '.topbar nav a', '.topbar .brand', 'legend']));
  });

  await check('the form offers what GET /v1/catalog lists; the preset hint shows its resolved fields', async () => {
    const catalog = await api('/v1/catalog');
    await page.waitForSelector('#submit-form[data-catalog="loaded"]');
    const gpus = await page.$$eval('#gpu option', (os) => os.map((o) => o.value));
    assertEq(JSON.stringify(gpus), JSON.stringify(catalog.devices.map((d) => d.name)), 'GPU choices');
    const precisions = await page.$$eval('#precision option', (os) => os.map((o) => o.value));
    assertEq(JSON.stringify(precisions), JSON.stringify(catalog.precisions), 'precision choices');
    const frameworks = await page.$$eval('#framework option', (os) => os.map((o) => o.value));
    assertEq(JSON.stringify(frameworks), JSON.stringify(catalog.frameworks.map((f) => f.name)), 'framework choices');
    assertEq(await page.inputValue('#framework'), 'megatron-core', 'default framework');
    const presets = await page.$$eval('#preset-list option', (os) => os.map((o) => o.value));
    assertEq(JSON.stringify(presets), JSON.stringify(catalog.presets.map((p) => p.name)), 'preset list');
    assertEq(await page.inputValue('#gpu'), 'a100-80gb', 'default GPU kept');
    await page.fill('#preset', 'llama3.1-405b');
    const hint = await page.textContent('#preset-hint');
    assert(hint.startsWith('126 layers, hidden 16384, 128 heads (8 groups)'), `preset hint: ${hint}`);
    await page.fill('#preset', 'gpt3-175b');
    assert((await page.textContent('#preset-hint')).startsWith('96 layers, hidden 12288, 96 heads'), 'gpt3-175b hint');
  });

  await check('a rejected spec shows the server message in the form and stays on the page', async () => {
    await page.fill('#preset', 'no-such-model');
    await page.click('#submit-job');
    await page.waitForSelector('#submit-form [role="alert"]');
    const text = await page.textContent('#submit-form [role="alert"]');
    assert(/INVALID_ARGUMENT \(HTTP 400\)/.test(text) && text.includes('no-such-model') && text.includes('gpt3-175b'), `form error: ${text}`);
    assertEq(await page.evaluate(() => location.hash), '', 'no navigation on error');
  });

  await check(`submit ${SPEC.preset} on ${SPEC.gpus} x ${SPEC.gpu} (model mode) through the form`, async () => {
    await page.check('#source-preset');
    await page.fill('#preset', SPEC.preset);
    await page.fill('#seq-length', String(SPEC.seq));
    await page.fill('#global-batch', String(SPEC.batch));
    await page.selectOption('#gpu', SPEC.gpu);
    await page.fill('#num-gpus', String(SPEC.gpus));
    await page.fill('#gpus-per-node', '8');
    await page.selectOption('#mode', 'model');
    await page.fill('#job-name', 'web-test gpt3-175b');
    await page.click('#submit-job');
    await page.waitForFunction(() => /^#\/jobs\/.+/.test(location.hash), null, { timeout: 60_000 });
    jobId = decodeURIComponent((await page.evaluate(() => location.hash)).replace('#/jobs/', ''));
    const job = await api(`/v1/jobs/${encodeURIComponent(jobId)}`);
    // The coordinator keeps the spec resolved: the preset's architecture, as the catalog has it.
    const preset = (await api('/v1/catalog')).presets.find((p) => p.name === SPEC.preset);
    assertEq(job.spec.model.name, SPEC.preset, 'submitted spec.model.name (from the API)');
    assertEq(job.spec.model.num_layers, preset.model.num_layers, 'spec.model.num_layers = the catalog preset\'s');
    assertEq(n(job.spec.model.num_layers), 96, 'GPT-3 175B has 96 layers');
    assertEq(n(job.spec.cluster.num_gpus), SPEC.gpus, 'submitted spec.cluster.num_gpus');
    assertEq(job.spec.cluster.gpu, SPEC.gpu, 'submitted spec.cluster.gpu');
    assertEq(n(job.spec.training.seq_length), SPEC.seq, 'submitted spec.training.seq_length');
    assertEq(n(job.spec.training.global_batch_size), SPEC.batch, 'submitted spec.training.global_batch_size');
    assertEq(job.spec.training.framework, 'megatron-core', 'submitted spec.training.framework');
    assertEq(job.spec.search.mode, 'model', 'submitted spec.search.mode');
  });

  await check('the job page shows the job reach SUCCEEDED (live polling)', async () => {
    assert(jobId, 'no job was submitted');
    await page.waitForSelector('.job-header .badge[data-state="JOB_STATE_SUCCEEDED"]', { timeout: 180_000 });
    await page.waitForSelector('#ranked-table tbody tr', { timeout: 60_000 });
    results = await api(`/v1/jobs/${encodeURIComponent(jobId)}/results`);
    assertEq(results.state, 'JOB_STATE_SUCCEEDED', 'results.state');
    assert((results.plan?.ranked ?? []).length > 0, 'the planner ranked no layout for GPT-3 175B on 1024 A100s');
    await page.screenshot({ path: join(SHOTS, 'job-1280.png'), fullPage: true });
  });

  const ranked = () => results?.plan?.ranked ?? [];

  await check('ranked table: one row per ranked layout, values from the API, headers are buttons', async () => {
    const rows = await page.$$eval('#ranked-table tbody tr', (trs) =>
      trs.map((tr) => ({
        rank: Number(tr.getAttribute('data-rank')),
        tp: Number(tr.querySelector('td[data-col="tp"]').getAttribute('data-value')),
        pp: Number(tr.querySelector('td[data-col="pp"]').getAttribute('data-value')),
        dp: Number(tr.querySelector('td[data-col="dp"]').getAttribute('data-value')),
        mfuText: tr.querySelector('td[data-col="mfu"]').textContent,
      })),
    );
    assertEq(rows.length, ranked().length, 'table rows vs plan.ranked');
    ranked().forEach((r, i) => {
      const row = rows[i];
      assertEq(row.rank, n(r.rank), `row ${i} rank (default order is by rank)`);
      assertEq(row.tp, n(r.config.tp, 1), `row ${i} TP`);
      assertEq(row.pp, n(r.config.pp, 1), `row ${i} PP`);
      assertEq(row.dp, n(r.config.dp, 1), `row ${i} DP`);
      assertEq(row.mfuText, `${(n(r.mfu) * 100).toFixed(1)} %`, `row ${i} MFU text`);
      assertEq(n(r.config.tp, 1) * n(r.config.pp, 1) * n(r.config.cp, 1) * n(r.config.dp, 1), SPEC.gpus, `row ${i}: tp*pp*cp*dp = N`);
    });
    const headers = await page.$$eval('#ranked-table thead th', (ths) => ths.map((th) => !!th.querySelector('button')));
    assertEq(headers.length, 16, 'ranked table columns');
    assert(headers.every(Boolean), 'every ranked-table header holds a button');
  });

  await check('sorting by MFU: descending then ascending by the numbers', async () => {
    const readMfu = () => page.$$eval('#ranked-table tbody td[data-col="mfu"]', (tds) => tds.map((td) => Number(td.getAttribute('data-value'))));
    const sortState = () => page.getAttribute('#ranked-table th[data-col="mfu"]', 'aria-sort');
    await page.click('#ranked-table button[data-sort-key="mfu"]');
    assertEq(await sortState(), 'descending', 'aria-sort after the first click');
    const desc = await readMfu();
    const expected = ranked().map((r) => n(r.mfu)).sort((a, b) => b - a);
    assertEq(JSON.stringify(desc), JSON.stringify(expected), 'MFU column after sorting descending');
    await page.click('#ranked-table button[data-sort-key="mfu"]');
    assertEq(await sortState(), 'ascending', 'aria-sort after the second click');
    const asc = await readMfu();
    assertEq(JSON.stringify(asc), JSON.stringify([...expected].reverse()), 'MFU column after sorting ascending');
    // Sorting by iteration time is the inverse of sorting by throughput (same job, same N).
    await page.click('#ranked-table button[data-sort-key="iter"]');
    const iters = await page.$$eval('#ranked-table tbody td[data-col="iter"]', (tds) => tds.map((td) => Number(td.getAttribute('data-value'))));
    for (let i = 1; i < iters.length; i++) assert(iters[i - 1] <= iters[i], `iteration column not ascending at ${i}: ${iters}`);
    await page.click('#ranked-table button[data-sort-key="rank"]');
    assertEq(await page.getAttribute('#ranked-table th[data-col="rank"]', 'aria-sort'), 'ascending', 'rank sort');
  });

  await check('scatter: one point per ranked layout, the Pareto frontier and the capacity line', async () => {
    const count = await page.getAttribute('#chart-scatter', 'data-point-count');
    assertEq(Number(count), ranked().length, 'data-point-count');
    const opt = await page.evaluate(() => {
      const o = window.paratune.charts.scatter.getOption();
      return {
        points: o.series[0].data.map((d) => (Array.isArray(d) ? d : d.value)),
        frontier: o.series[1].data,
        capacity: o.series[0].markLine?.data?.[0]?.xAxis,
      };
    });
    assertEq(opt.points.length, ranked().length, 'scatter series points');
    ranked().forEach((r, i) => {
      assert(Math.abs(opt.points[i][0] - n(r.memory.peak_gib)) < 1e-9, `point ${i} x = peak_gib`);
      assert(Math.abs(opt.points[i][1] - n(r.tokens_per_sec_per_gpu)) < 1e-9, `point ${i} y = tokens/s/GPU`);
    });
    // The frontier, recomputed here: sorted by memory, keep each point faster than all before.
    const pts = ranked().map((r) => [n(r.memory.peak_gib), n(r.tokens_per_sec_per_gpu)]).sort((a, b) => a[0] - b[0] || b[1] - a[1]);
    let best = -Infinity;
    const frontier = pts.filter(([, t]) => (t > best ? ((best = t), true) : false));
    assertEq(JSON.stringify(opt.frontier.map((p) => [p[0], p[1]])), JSON.stringify(frontier), 'Pareto frontier');
    assertEq(n(opt.capacity), n(ranked()[0].memory.capacity_gib), 'capacity line at capacity_gib');
    assertEq(n(ranked()[0].memory.capacity_gib), 80, 'A100-80GB capacity (GiB) reported by the planner');
  });

  let chosen = null;
  await check('breakdown of a selected layout: time and memory bars match the API', async () => {
    const idx = ranked().length > 1 ? 1 : 0;
    chosen = ranked()[idx];
    await page.click(`#ranked-table tr[data-index="${idx}"] button.row-select`);
    await page.waitForSelector(`#breakdown[data-index="${idx}"]`);
    assertEq(Number(await page.getAttribute('#breakdown', 'data-rank')), n(chosen.rank), 'breakdown rank');
    assertEq(Number(await page.getAttribute('#breakdown', 'data-tp')), n(chosen.config.tp, 1), 'breakdown TP');
    const bars = await page.evaluate(() => {
      const t = window.paratune.charts.time.getOption();
      const m = window.paratune.charts.memory.getOption();
      return {
        time: Object.fromEntries(t.series.map((s) => [s.name, s.data[0]])),
        memory: Object.fromEntries(m.series.map((s) => [s.name, s.data[0]])),
        categories: t.yAxis[0].data,
      };
    });
    assert(bars.categories[0].startsWith(`#${n(chosen.rank)}`), `first bar is the selected layout: ${bars.categories}`);
    const t = chosen.time ?? {};
    const timeNames = { compute: 'compute', tp_comm: 'TP comm', cp_comm: 'CP comm', pp_bubble: 'PP bubble', pp_p2p: 'PP p2p', dp_comm: 'DP comm', optimizer: 'optimizer' };
    for (const [k, label] of Object.entries(timeNames)) assertEq(bars.time[label], n(t[k]), `time bar ${label}`);
    const m = chosen.memory ?? {};
    for (const k of ['weights', 'gradients', 'optimizer', 'activations', 'other']) assertEq(bars.memory[k], n(m[k]), `memory bar ${k}`);
    const sel = await page.getAttribute(`#ranked-table tr[data-index="${idx}"]`, 'aria-selected');
    assertEq(sel, 'true', 'selected row marked');
    await page.locator('#breakdown').screenshot({ path: join(SHOTS, 'breakdown-1280.png') });
  });

  // The spec the form submitted, as a spec file for the CLI.
  const FORM_SPEC = {
    name: 'web-test gpt3-175b',
    model: { preset: SPEC.preset },
    training: { seq_length: SPEC.seq, global_batch_size: SPEC.batch, precision: 'bf16' },
    cluster: { gpu: SPEC.gpu, num_gpus: SPEC.gpus, gpus_per_node: 8 },
    search: { mode: 'model', top_k: 10 },
  };

  await check('Megatron export: the download is `paratune export --format megatron` for the selected layout, byte for byte', async () => {
    assert(chosen, 'no layout selected');
    const position = ranked().indexOf(chosen) + 1;
    const { bytes, name } = await downloadOf('#export-megatron');
    assertSameBytes(bytes, cliExport(FORM_SPEC, 'megatron', position), `rank ${position}`);
    const text = bytes.toString('utf8');
    const c = chosen.config;
    const expectFlag = (flag, value) => {
      const re = new RegExp(`^${flag} ${value}( \\\\)?$`, 'm');
      assert(re.test(text), `export lacks "${flag} ${value}":\n${text}`);
    };
    expectFlag('--tensor-model-parallel-size', n(c.tp, 1));
    expectFlag('--pipeline-model-parallel-size', n(c.pp, 1));
    expectFlag('--micro-batch-size', n(c.micro_batch_size, 1));
    expectFlag('--num-layers', 96);
    assertEq(name, `paratune-${jobId}-rank${position}-megatron.txt`, 'file name');
  });

  await check('NeMo export is `paratune export --format nemo`; the JSON export is the API layout', async () => {
    const position = ranked().indexOf(chosen) + 1;
    const nemo = await downloadOf('#export-nemo');
    assertSameBytes(nemo.bytes, cliExport(FORM_SPEC, 'nemo', position), `NeMo rank ${position}`);
    const yaml = nemo.bytes.toString('utf8');
    assert(yaml.includes(`  tensor_model_parallel_size: ${n(chosen.config.tp, 1)}\n`), `NeMo TP:\n${yaml}`);
    assert(yaml.includes(`  num_nodes: ${SPEC.gpus / 8}\n`) && yaml.includes('  devices: 8\n'), 'NeMo trainer nodes/devices');
    const json = await downloadOf('#export-json');
    assertEq(JSON.stringify(JSON.parse(json.bytes.toString('utf8'))), JSON.stringify(chosen), 'JSON export equals the API layout');
  });

  await check('tp 8 pp 4 vp 12 with full recompute of 2 layers: Megatron and NeMo downloads equal `paratune export`', async () => {
    // 96 layers over pp 4 = 24 per stage; 2 of them recomputed is Megatron's block method,
    // counted per model chunk: ceil(2 / 12) = 1 (not "uniform 2").
    const spec = {
      name: 'web-test interleaved recompute',
      model: { preset: 'gpt3-175b' },
      training: { seq_length: 2048, global_batch_size: 1536 },
      cluster: { gpu: 'a100-80gb', num_gpus: 1024, gpus_per_node: 8 },
      search: { tp: [8], pp: [4], vp: [12], cp: [1], micro_batch_size: [1], sequence_parallel: [true], recompute: ['full'], recompute_num_layers: [2], distributed_optimizer: [true] },
    };
    const id = await submitAndWait(spec, 'tp 8 pp 4 vp 12 full recompute 2');
    await page.goto(`${BASE}/#/jobs/${encodeURIComponent(id)}`);
    await page.waitForSelector('#breakdown[data-index="0"] #export-megatron', { timeout: 60_000 });
    const megatron = await downloadOf('#export-megatron');
    assertSameBytes(megatron.bytes, cliExport(spec, 'megatron', 1), 'Megatron');
    const text = megatron.bytes.toString('utf8');
    assert(text.includes('--num-layers-per-virtual-pipeline-stage 2 \\\n'), `VP flag:\n${text}`);
    assert(text.includes('--recompute-method block \\\n--recompute-num-layers 1 \\\n'), `block, 1 per chunk:\n${text}`);
    const nemo = await downloadOf('#export-nemo');
    assertSameBytes(nemo.bytes, cliExport(spec, 'nemo', 1), 'NeMo');
    assert(nemo.bytes.toString('utf8').includes('  activations_checkpoint_method: block\n  activations_checkpoint_num_layers: 1\n'), 'NeMo block, 1');
    // Back to the first job's page for the checks that follow.
    await page.goto(`${BASE}/#/jobs/${encodeURIComponent(jobId)}`);
    await page.waitForFunction(
      ([id, rows]) => document.querySelector('.facts dd.mono')?.textContent === id && document.querySelectorAll('#ranked-table tbody tr').length === rows,
      [jobId, ranked().length],
      { timeout: 60_000 },
    );
  });

  await check('rejected layouts listed with reasons', async () => {
    const rejected = results.plan.rejected ?? [];
    assertEq(Number(await page.getAttribute('#rejected', 'data-count')), rejected.length, 'rejected count');
    if (rejected.length) {
      const first = await page.textContent('#rejected-table tbody tr td:nth-child(2)');
      assertEq(first, rejected[0].reason, 'first rejection reason');
    }
  });

  await check('contrast >= 4.5 on the job page (state badge, table, hints, stats)', async () => {
    assertContrast(
      await contrastOf(['.job-header h1', '.job-header .badge', '#ranked-table th button.sort', '#ranked-table td[data-col="mfu"]', 'tr.selected td[data-col="iter"]', '.hint', '.stat-label', '.facts dt', '#export-megatron', '.tag']),
    );
  });

  await check('the job list shows the job as succeeded', async () => {
    await page.goto(`${BASE}/#/jobs`);
    const sel = `#jobs-table tr[data-job-id="${jobId}"]`;
    await page.waitForSelector(`${sel}[data-state="JOB_STATE_SUCCEEDED"]`);
    assertEq((await page.textContent(`${sel} .badge`)).trim(), 'succeeded', 'badge text');
  });

  await check('upload a Hugging Face config.json: same plan as the llama3-8b preset', async () => {
    // meta-llama/Meta-Llama-3-8B config.json (public), as a user would upload it.
    const config = `${JSON.stringify(
      {
        architectures: ['LlamaForCausalLM'], attention_bias: false, attention_dropout: 0.0,
        bos_token_id: 128000, eos_token_id: 128001, hidden_act: 'silu', hidden_size: 4096,
        initializer_range: 0.02, intermediate_size: 14336, max_position_embeddings: 8192,
        model_type: 'llama', num_attention_heads: 32, num_hidden_layers: 32, num_key_value_heads: 8,
        pretraining_tp: 1, rms_norm_eps: 1e-5, rope_scaling: null, rope_theta: 500000.0,
        tie_word_embeddings: false, torch_dtype: 'bfloat16', transformers_version: '4.40.0.dev0',
        use_cache: true, vocab_size: 128256,
      },
      null,
      2,
    )}\n`;
    await page.goto(`${BASE}/#/jobs`);
    await page.check('#source-hf');
    await page.setInputFiles('#hf-config', { name: 'config.json', mimeType: 'application/json', buffer: Buffer.from(config) });
    await page.fill('#job-name', 'web-test hf llama3-8b');
    await page.fill('#seq-length', '2048');
    await page.fill('#global-batch', '64');
    await page.selectOption('#gpu', 'h100-sxm-80gb');
    await page.fill('#num-gpus', '16');
    await page.selectOption('#mode', 'model');
    const [post] = await Promise.all([
      page.waitForRequest((r) => r.method() === 'POST' && new URL(r.url()).pathname === '/v1/jobs'),
      page.click('#submit-job'),
    ]);
    const sent = JSON.parse(post.postData() ?? '{}').spec?.model ?? {};
    assertEq(sent.hf_config_json, config, 'the page sent model.hf_config_json: the file, byte for byte');
    assert(!sent.preset, 'no preset sent with an uploaded config');
    await page.waitForFunction((prev) => /^#\/jobs\/.+/.test(location.hash) && location.hash !== prev, `#/jobs/${jobId}`);
    const hfId = decodeURIComponent((await page.evaluate(() => location.hash)).replace('#/jobs/', ''));
    // The coordinator keeps the config resolved into the architecture it describes.
    const job = await api(`/v1/jobs/${encodeURIComponent(hfId)}`);
    assertEq(n(job.spec.model.num_layers), 32, 'spec.model.num_layers from num_hidden_layers');
    assertEq(n(job.spec.model.num_query_groups), 8, 'spec.model.num_query_groups from num_key_value_heads');
    await page.waitForSelector('.job-header .badge[data-state="JOB_STATE_SUCCEEDED"]', { timeout: 180_000 });
    await page.waitForSelector('#ranked-table tbody tr');
    const hf = (await api(`/v1/jobs/${encodeURIComponent(hfId)}/results`)).plan.ranked ?? [];
    // The same run through the REST API with the preset: the planner must agree.
    const presetId = await submitAndWait(
      { model: { preset: 'llama3-8b' }, training: { seq_length: '2048', global_batch_size: '64' }, cluster: { gpu: 'h100-sxm-80gb', num_gpus: '16' }, search: { mode: 'model' } },
      'preset llama3-8b',
    );
    const pre = (await api(`/v1/jobs/${presetId}/results`)).plan.ranked ?? [];
    assert(hf.length > 0, 'the uploaded config got no ranked layout');
    assertEq(JSON.stringify(hf.map((r) => [r.config, r.iteration_time_s, r.memory.peak_gib])), JSON.stringify(pre.map((r) => [r.config, r.iteration_time_s, r.memory.peak_gib])), 'HF config vs preset ranking');
    // The coordinator's export has the layer count of the uploaded config.
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export-megatron')]);
    const text = readFileSync(await download.path(), 'utf8');
    assert(/^--num-layers 32( \\)?$/m.test(text), `--num-layers 32 from num_hidden_layers:\n${text}`);
    assert(text.includes(`--tensor-model-parallel-size ${n(hf[0].config.tp, 1)}`), 'TP of layout #1');
  });

  await check('profile mode: live task progress from the CPU worker, measured layouts', async () => {
    assert(worker, `no worker: ${WORKER} was not built`);
    // A tiny Llama-style config so that the CPU worker measures it in seconds (fp32: the CPU
    // backend has no bf16).
    const tiny = `${JSON.stringify({ architectures: ['LlamaForCausalLM'], hidden_act: 'silu', hidden_size: 256, intermediate_size: 688, max_position_embeddings: 512, model_type: 'llama', num_attention_heads: 4, num_hidden_layers: 4, num_key_value_heads: 4, rms_norm_eps: 1e-5, tie_word_embeddings: false, vocab_size: 1024 })}\n`;
    const id = await submitCpuProfileJob(tiny, { name: 'web-test profile tiny', seq: '256', batch: '8', topK: '5' });
    // Watch the progress caption while the worker runs the tasks.
    const seen = [];
    const deadline = Date.now() + 180_000;
    for (;;) {
      const caption = await page.textContent('.job-header .progress-caption').catch(() => '');
      if (caption && seen[seen.length - 1] !== caption) seen.push(caption);
      const state = await page.getAttribute('.job-header .badge', 'data-state').catch(() => '');
      if (state === 'JOB_STATE_SUCCEEDED' || state === 'JOB_STATE_FAILED' || state === 'JOB_STATE_CANCELLED') {
        // The caption was read before the badge; the render that set the final badge may
        // also have moved the caption on, so read it once more.
        const last = await page.textContent('.job-header .progress-caption').catch(() => '');
        if (last && seen[seen.length - 1] !== last) seen.push(last);
        break;
      }
      assert(Date.now() < deadline, `profile job not done in 180 s; captions: ${seen.join(' | ')}`);
      await sleep(200);
    }
    const job = await api(`/v1/jobs/${encodeURIComponent(id)}`);
    assertEq(job.state, 'JOB_STATE_SUCCEEDED', `profile job (${job.error || ''})`);
    const total = n(job.progress.tasks_total);
    assert(total > 0, 'a profile job has tasks');
    const counts = seen.map((c) => c.match(/^(\d+)\/(\d+) tasks/)).filter(Boolean).map((m) => [Number(m[1]), Number(m[2])]);
    assert(counts.length >= 2, `the page showed no live task progress: ${seen.join(' | ')}`);
    for (let i = 1; i < counts.length; i++) assert(counts[i][0] >= counts[i - 1][0], `tasks done went down: ${seen.join(' | ')}`);
    assert(counts.some(([d]) => d < total), `never saw the job unfinished: ${seen.join(' | ')}`);
    assertEq(JSON.stringify(counts[counts.length - 1]), JSON.stringify([n(job.progress.tasks_done), total]), 'final caption vs API');
    await page.waitForSelector('#ranked-table tbody tr');
    const ranked = (await api(`/v1/jobs/${encodeURIComponent(id)}/results`)).plan.ranked ?? [];
    const sources = await page.$$eval('#ranked-table tbody td[data-col="source"]', (tds) => tds.map((td) => td.textContent.trim()));
    assertEq(JSON.stringify(sources), JSON.stringify(ranked.map((r) => r.source || 'modelled')), 'source column vs API');
    assert(sources.includes('measured'), `no measured layout: ${sources}`);
    console.log(`     profile progress seen: ${seen.join(' → ')}`);
    await page.screenshot({ path: join(SHOTS, 'job-profile-1280.png'), fullPage: true });
  });

  await check('verify: the job page shows the ranking verdict and each verified layout next to its prediction', async () => {
    assert(worker, `no worker: ${WORKER} was not built`);
    // A tiny model whose top 2 layouts the 2-device CPU worker trains end to end in seconds.
    const id = await submitAndWait(
      {
        name: 'web-test verify',
        model: { name: 'tiny', num_layers: '4', hidden_size: '64', num_attention_heads: '4', vocab_size: '256' },
        training: { seq_length: '64', global_batch_size: '8', precision: 'fp32', flash_attention: false },
        cluster: { gpu: 'cpu', num_gpus: '2', gpus_per_node: '2' },
        search: { mode: 'model', top_k: '3', verify_top_k: '2' },
      },
      'verify',
    );
    const plan = (await api(`/v1/jobs/${id}/results`)).plan;
    const summary = plan.verification_summary ?? {};
    assertEq(n(summary.verified), 2, 'verified layouts in verification_summary');
    assertEq(n(summary.pairs), 1, 'pairs in verification_summary');
    assert(/^(confirmed|a tie at this run's resolution|not confirmed): /.test(summary.verdict ?? ''), `verdict: ${summary.verdict}`);
    await page.goto(`${BASE}/#/jobs/${encodeURIComponent(id)}`);
    await page.waitForSelector('#verification-summary');
    assertEq((await page.textContent('#verification-summary')).trim(), `End-to-end verification of the ranking: ${summary.verdict}.`, 'verdict on the page');
    // Layout #1's breakdown (selected by default) has its measurement next to its prediction.
    const line = (await page.textContent('#verification')).trim();
    assert(/^Trained end to end on 2 ranks: measured [\d.]+ m?s \(steps [\d.]+ m?s–[\d.]+ m?s\) vs predicted [\d.]+ m?s per iteration \([+-]?[\d.]+ % error\)/.test(line), `layout #1 verification: ${line}`);
    await page.screenshot({ path: join(SHOTS, 'job-verify-1280.png'), fullPage: true });
  });

  await check('cancel a running profile job from its page', async () => {
    // Different shapes from the job above, so that no task is answered from the cache.
    const cfg = `${JSON.stringify({ architectures: ['LlamaForCausalLM'], hidden_act: 'silu', hidden_size: 384, intermediate_size: 1024, model_type: 'llama', num_attention_heads: 6, num_hidden_layers: 6, num_key_value_heads: 6, tie_word_embeddings: false, vocab_size: 2048 })}\n`;
    const id = await submitCpuProfileJob(cfg, { name: 'web-test cancel', seq: '512', batch: '16' });
    await page.click('#cancel-job');
    await page.waitForSelector('.job-header .badge[data-state="JOB_STATE_CANCELLED"]', { timeout: 120_000 });
    assertEq((await api(`/v1/jobs/${encodeURIComponent(id)}`)).state, 'JOB_STATE_CANCELLED', 'API state after Cancel');
    assertEq(await page.$('#cancel-job'), null, 'no Cancel button on a cancelled job');
  });

  await check('400-pixel-wide window: no horizontal overflow on the jobs and job pages', async () => {
    await page.setViewportSize({ width: 400, height: 800 });
    await page.goto(`${BASE}/#/jobs`);
    await page.waitForSelector('#jobs-table tbody tr[data-job-id]');
    let o = await horizontalOverflow();
    assert(o.doc <= o.viewport && o.body <= o.viewport, `jobs page overflows at 400 px: ${JSON.stringify(o)}`);
    await page.screenshot({ path: join(SHOTS, 'jobs-400.png') });
    await page.goto(`${BASE}/#/jobs/${encodeURIComponent(jobId)}`);
    await page.waitForSelector('#ranked-table tbody tr');
    // The scatter sizes itself once the page has laid out: wait for that (a condition, not a
    // fixed pause; a loaded machine can take longer), then measure. A chart that never fits
    // fails the assertions below with the numbers.
    await page.waitForSelector('#chart-scatter canvas');
    await page
      .waitForFunction(() => document.querySelector('#chart-scatter canvas').getBoundingClientRect().width <= 400, null, { timeout: 15_000 })
      .catch(() => undefined);
    o = await horizontalOverflow();
    assert(o.doc <= o.viewport && o.body <= o.viewport, `job page overflows at 400 px: ${JSON.stringify(o)}`);
    const chartWidth = await page.evaluate(() => document.querySelector('#chart-scatter canvas').getBoundingClientRect().width);
    assert(chartWidth <= 400 && chartWidth > 200, `scatter canvas width at 400 px: ${chartWidth}`);
    await page.screenshot({ path: join(SHOTS, 'job-400.png') });
    await page.locator('#chart-scatter').scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(SHOTS, 'job-400-charts.png') });
    await page.setViewportSize({ width: 1280, height: 800 });
  });

  // --- an inference job (`kind: inference`): submitted through the form's serving preset
  let inferenceJobId = '';
  let inferenceResults = null;

  await check('the form preset for an inference job submits llama3.1-8b serving on 8 x h100-sxm-80gb', async () => {
    await page.goto(`${BASE}/#/jobs`);
    await page.waitForSelector('#submit-form[data-catalog="loaded"]');
    await page.selectOption('#job-kind', 'inference');
    assert(await page.isHidden('#training-fields'), 'training fields hidden for an inference job');
    assert(await page.isVisible('#serving-fields'), 'serving fields shown for an inference job');
    assertEq(await page.inputValue('#preset'), 'llama3.1-8b', 'preset of the inference form');
    assertEq(await page.inputValue('#gpu'), 'h100-sxm-80gb', 'GPU of the inference form');
    assertEq(await page.inputValue('#num-gpus'), '8', 'GPU count of the inference form');
    await page.fill('#job-name', 'web-test llama3.1-8b serving');
    await page.fill('#isl', '2048');
    await page.fill('#osl', '128');
    await page.fill('#concurrency', '64');
    await page.fill('#ttft-p99', '2000');
    await page.fill('#tpot-p99', '50');
    await page.fill('#top-k', '6');
    await page.click('#submit-job');
    await page.waitForFunction(() => /^#\/jobs\/.+/.test(location.hash), null, { timeout: 60_000 });
    inferenceJobId = decodeURIComponent((await page.evaluate(() => location.hash)).replace('#/jobs/', ''));
    const job = await api(`/v1/jobs/${encodeURIComponent(inferenceJobId)}`);
    assertEq(job.spec.kind, 'inference', 'submitted spec.kind');
    assertEq(n(job.spec.serving.isl), 2048, 'submitted serving.isl');
    assertEq(n(job.spec.serving.concurrency), 64, 'submitted serving.concurrency');
    assertEq(n(job.spec.serving.tpot_ms.p99), 50, 'submitted serving.tpot_ms.p99');
    assertEq(job.spec.training, undefined, 'an inference spec has no training section');
  });

  await check('inference job page: the ranked serving table is the API ranking', async () => {
    assert(inferenceJobId, 'no inference job was submitted');
    await page.waitForSelector('.job-header .badge[data-state="JOB_STATE_SUCCEEDED"]', { timeout: 180_000 });
    await page.waitForSelector('#inference-table tbody tr', { timeout: 60_000 });
    inferenceResults = await api(`/v1/jobs/${encodeURIComponent(inferenceJobId)}/results`);
    const inf = inferenceResults.plan?.inference ?? {};
    const ranked = inf.ranked ?? [];
    assert(ranked.length > 0, 'the planner ranked no serving layout for llama3.1-8b on 8 H100');
    assert((await page.textContent('#serving-facts')).includes('2048 in / 128 out tokens, 64 concurrent clients'), 'serving facts in the header');
    const rows = await page.$$eval('#inference-table tbody tr', (trs) =>
      trs.map((tr) => {
        const v = (col) => tr.querySelector(`td[data-col="${col}"]`).getAttribute('data-value');
        return { rank: Number(tr.getAttribute('data-rank')), gpu: Number(v('tps_gpu')), user: Number(v('tps_user')), ttft99: Number(v('ttft_p99')), tpot99: Number(v('tpot_p99')), memory: Number(v('memory')), meets: Number(v('meets')), config: tr.querySelector('td[data-col="config"]').textContent };
      }),
    );
    assertEq(rows.length, ranked.length, 'table rows vs plan.inference.ranked');
    ranked.forEach((r, i) => {
      assertEq(rows[i].rank, r.rank, `row ${i} rank`);
      assertEq(rows[i].gpu, r.output_tokens_per_sec_per_gpu, `row ${i} tokens/s/GPU`);
      assertEq(rows[i].user, r.tokens_per_sec_per_user, `row ${i} tokens/s/user`);
      assertEq(rows[i].ttft99, r.ttft_ms.p99, `row ${i} TTFT p99`);
      assertEq(rows[i].tpot99, r.tpot_ms.p99, `row ${i} TPOT p99`);
      assertEq(rows[i].memory, r.memory.peak, `row ${i} peak memory`);
      assertEq(rows[i].meets, r.meets_limits ? 1 : 0, `row ${i} meets_limits`);
      assert(rows[i].config.startsWith(`TP${r.config.tp} PP${r.config.pp}`), `row ${i} config: ${rows[i].config}`);
    });
    const headers = await page.$$eval('#inference-table thead th', (ths) => ths.map((th) => th.textContent.replace(/[▲▼]/g, '').trim()));
    assertEq(JSON.stringify(headers), JSON.stringify(['Rank', 'Config', 'Tok/s/GPU', 'Tok/s/user', 'TTFT p50', 'TTFT p99', 'TPOT p50', 'TPOT p99', 'Memory / GPU', 'Meets limits']), 'inference table columns');
    if (inf.recommendation) assertEq(await page.textContent('#recommendation'), inf.recommendation, 'recommendation');
    await page.screenshot({ path: join(SHOTS, 'inference-job-1280.png'), fullPage: true });
  });

  await check('inference Pareto chart: the ranked points, the API Pareto front and the TPOT limit line', async () => {
    const inf = inferenceResults.plan.inference;
    const option = await page.evaluate(() => {
      const o = window.paratune.charts.pareto.getOption();
      return { points: o.series[0].data.map((d) => d.value), front: o.series[1].data, lines: (o.series[0].markLine?.data ?? []).map((d) => d.xAxis), x: o.xAxis[0].name, y: o.yAxis[0].name };
    });
    assertEq(option.x, 'output tokens/s per user', 'x axis');
    assertEq(option.y, 'output tokens/s per GPU', 'y axis');
    assertEq(option.points.length, inf.ranked.length, 'one point per ranked layout');
    inf.ranked.forEach((r, i) => {
      assertEq(option.points[i][0], r.tokens_per_sec_per_user, `point ${i} x`);
      assertEq(option.points[i][1], r.output_tokens_per_sec_per_gpu, `point ${i} y`);
    });
    const front = [...inf.pareto_front].map((r) => [r.tokens_per_sec_per_user, r.output_tokens_per_sec_per_gpu]).sort((a, b) => a[0] - b[0]);
    assertEq(JSON.stringify(option.front), JSON.stringify(front), 'the Pareto front line is the API pareto_front');
    // tpot_ms.p99 = 50 ms: a user reads at most 1000 / 50 = 20 tokens/s.
    assertEq(JSON.stringify(option.lines), JSON.stringify([20]), 'limit lines (tokens/s per user)');
    assertEq(await page.getAttribute('#chart-pareto', 'data-front-count'), String(inf.pareto_front.length), 'front count');
  });

  await check('inference breakdowns: step time and memory bars of a selected layout match the API', async () => {
    const ranked = inferenceResults.plan.inference.ranked;
    const i = ranked.length > 1 ? 1 : 0;
    await page.click(`#inference-table tbody tr[data-index="${i}"] button.row-select`);
    await page.waitForSelector(`#breakdown[data-index="${i}"]`);
    const r = ranked[i];
    const bars = await page.evaluate(() => {
      const step = window.paratune.charts.step.getOption();
      const mem = window.paratune.charts['serving-memory'].getOption();
      return { step: step.series.map((s) => [s.name, s.data]), memory: mem.series.map((s) => [s.name, s.data[0]]), capacity: (mem.series[0].markLine?.data ?? [])[0]?.xAxis };
    });
    const byName = Object.fromEntries(bars.step);
    assertEq(JSON.stringify(byName.compute), JSON.stringify([r.prefill_step.compute_ms, r.decode_step.compute_ms]), 'compute bars (prefill, decode)');
    assertEq(JSON.stringify(byName['memory reads']), JSON.stringify([r.prefill_step.memory_ms, r.decode_step.memory_ms]), 'memory-read bars');
    assertEq(JSON.stringify(byName['TP comm']), JSON.stringify([r.prefill_step.tp_comm_ms, r.decode_step.tp_comm_ms]), 'TP bars');
    const mem = Object.fromEntries(bars.memory);
    assertEq(mem.weights, r.memory.weights, 'weights bar');
    assertEq(mem['KV cache'], r.memory.kv_cache, 'KV cache bar');
    assertEq(mem['runtime reserve'], r.memory.reserve, 'reserve bar');
    assertEq(bars.capacity, r.memory.capacity, 'capacity line');
    assertEq(await page.getAttribute('#breakdown', 'data-rank'), String(r.rank), 'breakdown rank');
  });

  await check('inference exports: the vllm and trtllm downloads are `paratune export --format vllm|trtllm` for the spec, byte for byte', async () => {
    // The spec the form submitted, as a spec file.
    const spec = {
      kind: 'inference',
      name: 'web-test llama3.1-8b serving',
      model: { preset: 'llama3.1-8b' },
      cluster: { gpu: 'h100-sxm-80gb', num_gpus: 8, gpus_per_node: 8 },
      serving: { engine: 'trtllm', isl: 2048, osl: 128, concurrency: 64, ttft_ms: { p99: 2000 }, tpot_ms: { p99: 50 } },
      search: { mode: 'model', top_k: 6 },
    };
    await page.click('#inference-table tbody tr[data-index="0"] button.row-select');
    await page.waitForSelector('#breakdown[data-index="0"]');
    for (const format of ['vllm', 'trtllm']) {
      const got = await downloadOf(`#export-${format}`);
      assert(got.name.endsWith(`-rank1-${format}.sh`), `${format} file name: ${got.name}`);
      assertSameBytes(got.bytes, cliExport(spec, format, 1), `${format} export`);
    }
  });

  await check('inference rejected layouts: the counts by rule and the listed layouts are the API\'s', async () => {
    const inf = inferenceResults.plan.inference;
    assertEq(await page.getAttribute('#rejected', 'data-total'), String(Math.max(inf.rejected_total ?? 0, (inf.rejected ?? []).length)), 'rejected total');
    const reasons = inf.rejected_reasons ?? {};
    if (Object.keys(reasons).length) {
      const rules = await page.$$eval('#rejected-rules tbody tr', (trs) => trs.map((tr) => [tr.children[1].textContent, Number(tr.children[0].textContent)]));
      const byRule = (a, b) => a[0].localeCompare(b[0]);
      assertEq(JSON.stringify(rules.sort(byRule)), JSON.stringify(Object.entries(reasons).sort(byRule)), 'rules and counts');
      const listed = await page.$$eval('#rejected-table tbody tr', (trs) => trs.map((tr) => tr.children[2].textContent));
      assertEq(JSON.stringify(listed), JSON.stringify((inf.rejected ?? []).map((r) => r.reason)), 'rejected reasons listed');
    }
  });

  await check('workers page lists what GET /v1/workers returns', async () => {
    let workers = (await api('/v1/workers')).workers ?? [];
    if (worker) {
      for (let i = 0; i < 100 && !workers.some((w) => w.name === WORKER_NAME); i++) {
        await sleep(100);
        workers = (await api('/v1/workers')).workers ?? [];
      }
      const w = workers.find((x) => x.name === WORKER_NAME);
      assert(w, `worker ${WORKER_NAME} did not register within 10 s:\n${serverLog}`);
      await page.goto(`${BASE}/#/workers`);
      const row = `#workers-table tr[data-worker-id="${w.id}"]`;
      await page.waitForSelector(row);
      const cells = await page.$$eval(`${row} td`, (tds) => tds.map((td) => td.textContent.trim()));
      assert(cells[0].startsWith(WORKER_NAME), `worker name cell: ${cells[0]}`);
      assertEq(cells[2], 'cpu', 'backend cell');
      assertEq(cells[3], w.device_kind, 'device kind cell');
      assert(cells[4].startsWith(`${(w.devices ?? []).length} ×`), `devices cell: ${cells[4]}`);
      assertEq(cells[5], String(w.cpu_cores ?? 0), 'CPU cores cell');
    }
    await page.goto(`${BASE}/#/workers`);
    await page.waitForSelector('#workers-table tbody tr');
    const rows = await page.$$('#workers-table tbody tr[data-worker-id]');
    assertEq(rows.length, workers.length, 'worker rows');
    if (!workers.length) assert((await page.textContent('#workers-table tbody')).includes('No worker registered'), 'empty-state text');
    await page.screenshot({ path: join(SHOTS, 'workers-1280.png') });
  });

  await check('no script errors in the page', async () => {
    assertEq(pageErrors.length, 0, `page errors: ${pageErrors.join(' | ')}`);
  });
} finally {
  await browser.close();
}

console.log(`screenshots: ${SHOTS}`);
console.log(`${passed} passed, ${failed} failed`);
cleanup();
process.exit(failed ? 1 : 0);
