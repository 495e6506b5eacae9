// The jobs page: the submit form and the job list with live state and progress.
import { api } from '../api';
import { clear, h } from '../dom';
import { isTerminal, num } from '../format';
import type { Catalog, Job, JobSpec } from '../types';
import { errorBanner, jobProgress, jobTitle, poll, stateBadge } from './common';

function field(label: string, id: string, control: HTMLElement, hint?: string): HTMLElement {
  return h(
    'div',
    { class: 'field' },
    h('label', { for: id }, label),
    control,
    hint ? h('span', { class: 'hint', id: `${id}-hint` }, hint) : null,
  );
}

function numberInput(id: string, value: number, min: number): HTMLInputElement {
  return h('input', { id, name: id, type: 'number', min, step: 1, value, required: true, inputmode: 'numeric' });
}

function select(id: string, options: string[], value: string): HTMLSelectElement {
  const el = h('select', { id, name: id });
  setOptions(el, options.map((o) => [o, o]), value);
  return el;
}

/** Replaces the options ([value, label]) of a select, keeping `value` selected when offered. */
function setOptions(el: HTMLSelectElement, options: [string, string][], value: string): void {
  clear(el);
  for (const [v, label] of options) el.append(h('option', { value: v }, label));
  el.value = options.some(([v]) => v === value) ? value : (options[0]?.[0] ?? '');
}

const GIB = 1024 ** 3;

/** The preset's resolved architecture in words, from the coordinator's catalog. */
function presetSummary(catalog: Catalog | null, name: string): string {
  if (!catalog) return 'e.g. gpt3-175b, llama3-8b';
  const preset = catalog.presets?.find((p) => p.name === name.trim().toLowerCase());
  if (!preset) return `${catalog.presets?.length ?? 0} presets; type to pick one`;
  const m = preset.model ?? {};
  return `${num(m.num_layers)} layers, hidden ${num(m.hidden_size)}, ${num(m.num_attention_heads)} heads (${num(m.num_query_groups)} groups), FFN ${num(m.ffn_hidden_size)}, vocabulary ${num(m.vocab_size)}, ${m.activation ?? '?'}`;
}

function buildForm(onSubmitted: (job: Job) => void): HTMLElement {
  const status = h('div', { class: 'form-status', 'aria-live': 'polite' });
  const name = h('input', { id: 'job-name', name: 'job-name', type: 'text', placeholder: 'optional', autocomplete: 'off' });
  const sourcePreset = h('input', { type: 'radio', name: 'model-source', id: 'source-preset', value: 'preset', checked: true });
  const sourceHf = h('input', { type: 'radio', name: 'model-source', id: 'source-hf', value: 'hf' });
  const preset = h('input', {
    id: 'preset',
    name: 'preset',
    type: 'text',
    list: 'preset-list',
    value: 'gpt3-175b',
    autocomplete: 'off',
    spellcheck: 'false',
  });
  const presetList = h('datalist', { id: 'preset-list' });
  const hfFile = h('input', { id: 'hf-config', name: 'hf-config', type: 'file', accept: '.json,application/json', disabled: true });
  const seq = numberInput('seq-length', 2048, 1);
  const batch = numberInput('global-batch', 1536, 1);
  // Presets, devices and precisions come from the coordinator's catalog (GET /v1/catalog).
  const precision = select('precision', ['bf16'], 'bf16');
  const framework = select('framework', ['megatron-core'], 'megatron-core');
  const gpu = select('gpu', ['a100-80gb'], 'a100-80gb');
  const numGpus = numberInput('num-gpus', 1024, 1);
  const perNode = numberInput('gpus-per-node', 8, 1);
  const mode = select('mode', ['model', 'profile'], 'model');
  const topK = numberInput('top-k', 10, 1);
  const submit = h('button', { type: 'submit', class: 'primary', id: 'submit-job' }, 'Submit job');
  // Inference jobs (`kind: inference`): the serving workload and its limits.
  const kind = select('job-kind', ['training', 'inference'], 'training');
  const engine = select('engine', ['trtllm', 'vllm', 'sglang'], 'trtllm');
  const isl = numberInput('isl', 2048, 1);
  const osl = numberInput('osl', 128, 1);
  const concurrency = numberInput('concurrency', 64, 1);
  const ttftP99 = numberInput('ttft-p99', 2000, 0);
  const tpotP99 = numberInput('tpot-p99', 50, 0);
  const trainingFields = h(
      'div',
      {class: 'grid-fields', id: 'training-fields'},
      field('Sequence length', 'seq-length', seq),
      field('Global batch (sequences)', 'global-batch', batch),
      field('Precision', 'precision', precision),
      field('Framework', 'framework', framework, 'the codebase that runs it'),
  );
  const servingFields = h(
    'div',
    { class: 'grid-fields', id: 'serving-fields', hidden: true },
    field('Engine', 'engine', engine),
    field('Input tokens (ISL)', 'isl', isl),
    field('Output tokens (OSL)', 'osl', osl),
    field('Concurrent clients', 'concurrency', concurrency),
    field('TTFT p99 limit (ms)', 'ttft-p99', ttftP99, '0 = no limit'),
    field('TPOT p99 limit (ms)', 'tpot-p99', tpotP99, '0 = no limit'),
  );
  // Switching to inference presets a serving spec: Llama 3.1 8B on one node of H100s.
  const syncKind = () => {
    const inference = kind.value === 'inference';
    trainingFields.hidden = inference;
    servingFields.hidden = !inference;
    mode.disabled = inference;
    if (inference) {
      mode.value = 'model';
      if (preset.value === 'gpt3-175b') preset.value = 'llama3.1-8b';
      if ([...gpu.options].some((o) => o.value === 'h100-sxm-80gb')) gpu.value = 'h100-sxm-80gb';
      numGpus.value = '8';
      perNode.value = '8';
    }
    preset.dispatchEvent(new Event('input'));
  };
  kind.addEventListener('change', syncKind);

  const syncSource = () => {
    const hf = sourceHf.checked;
    preset.disabled = !hf ? false : true;
    hfFile.disabled = !hf;
    hfFile.required = hf;
  };
  sourcePreset.addEventListener('change', syncSource);
  sourceHf.addEventListener('change', syncSource);

  const form = h(
    'form',
    { class: 'card submit-form', id: 'submit-form', 'aria-labelledby': 'submit-title', novalidate: true },
    h('h2', { id: 'submit-title' }, 'New tuning job'),
    field('Job name', 'job-name', name),
    field('Job kind', 'job-kind', kind, 'training: parallel layouts; inference: serving layouts under latency limits'),
    h(
      'fieldset',
      { class: 'model-source' },
      h('legend', {}, 'Model'),
      h('div', { class: 'radio' }, sourcePreset, h('label', { for: 'source-preset' }, 'Preset')),
      h('div', { class: 'radio' }, sourceHf, h('label', { for: 'source-hf' }, 'Hugging Face config.json')),
      field('Preset name', 'preset', preset, presetSummary(null, '')),
      presetList,
      field('config.json file', 'hf-config', hfFile),
    ),
    trainingFields,
    servingFields,
    h(
      'div',
      { class: 'grid-fields' },
      field('GPU type', 'gpu', gpu),
      field('GPU count', 'num-gpus', numGpus),
      field('GPUs per node', 'gpus-per-node', perNode),
      field('Mode', 'mode', mode, 'model: analytical; profile: measured by workers'),
      field('Layouts to return', 'top-k', topK),
    ),
    h('div', { class: 'row' }, submit),
    status,
  );

  let catalog: Catalog | null = null;
  const showPreset = () => {
    const hint = form.querySelector('#preset-hint');
    if (hint) hint.textContent = presetSummary(catalog, preset.value);
  };
  preset.addEventListener('input', showPreset);
  void api
    .getCatalog()
    .then((c) => {
      catalog = c;
      clear(presetList);
      for (const p of c.presets ?? []) presetList.append(h('option', { value: p.name }));
      const devices = c.devices ?? [];
      setOptions(gpu, devices.map((d): [string, string] => [d.name, d.host_memory ? `${d.name} (host memory)` : `${d.name} (${Math.round(num(d.memory_bytes) / GIB)} GiB)`]), gpu.value);
      setOptions(precision, (c.precisions ?? []).map((p): [string, string] => [p, p]), precision.value);
      setOptions(
          framework, (c.frameworks ?? []).map((f): [string, string] => [f.name, f.name]),
          framework.value);
      form.dataset.catalog = 'loaded';
      showPreset();
    })
    .catch((e) => status.append(errorBanner(e)));

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clear(status);
    const spec: JobSpec = {
      model: {},
      training: {
        seq_length: String(Math.trunc(num(seq.value))),
        global_batch_size: String(Math.trunc(num(batch.value))),
        precision: precision.value,
        framework: framework.value,
      },
      cluster: {
        gpu: gpu.value,
        num_gpus: String(Math.trunc(num(numGpus.value))),
        gpus_per_node: String(Math.trunc(num(perNode.value))),
      },
      search: {mode: mode.value, top_k: String(Math.trunc(num(topK.value)))},
    };
    if (kind.value === 'inference') {
      delete spec.training;
      spec.kind = 'inference';
      spec.serving = {
        engine: engine.value,
        isl: String(Math.trunc(num(isl.value))),
        osl: String(Math.trunc(num(osl.value))),
        concurrency: String(Math.trunc(num(concurrency.value))),
      };
      if (num(ttftP99.value) > 0) spec.serving.ttft_ms = { p99: num(ttftP99.value) };
      if (num(tpotP99.value) > 0) spec.serving.tpot_ms = { p99: num(tpotP99.value) };
    }
    if (name.value.trim()) spec.name = name.value.trim();
    try {
      if (sourceHf.checked) {
        const file = hfFile.files?.[0];
        if (!file) throw new Error('config.json file: choose a Hugging Face config.json');
        const text = await file.text();
        try {
          JSON.parse(text);
        } catch (e) {
          throw new Error(`config.json file: ${file.name} is not valid JSON (${String(e)})`);
        }
        spec.model = { hf_config_json: text };
      } else {
        if (!preset.value.trim()) throw new Error('Preset name: enter a preset, e.g. gpt3-175b');
        spec.model = { preset: preset.value.trim() };
      }
      submit.disabled = true;
      status.append(h('span', {}, 'Submitting…'));
      const job = await api.submitJob(spec);
      clear(status);
      status.append(h('span', {}, `Submitted job ${job.id ?? ''}.`));
      onSubmitted(job);
    } catch (e) {
      clear(status);
      status.append(errorBanner(e));
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

function jobRow(job: Job): HTMLTableRowElement {
  const spec = job.spec ?? {};
  const id = job.id ?? '';
  const gpus = `${num(spec.cluster?.num_gpus)} × ${spec.cluster?.gpu ?? '?'}`;
  const cancel = isTerminal(job.state)
    ? null
    : h(
        'button',
        {
          type: 'button',
          class: 'small',
          'aria-label': `Cancel job ${id}`,
          onclick: async (ev: Event) => {
            (ev.currentTarget as HTMLButtonElement).disabled = true;
            try {
              await api.cancelJob(id);
            } catch {
              (ev.currentTarget as HTMLButtonElement | null)?.removeAttribute('disabled');
            }
          },
        },
        'Cancel',
      );
  return h(
    'tr',
    { 'data-job-id': id, 'data-state': job.state ?? '' },
    h('td', {}, h('a', { href: `#/jobs/${encodeURIComponent(id)}` }, jobTitle(job)), h('div', { class: 'sub mono' }, id)),
    h('td', {}, stateBadge(job.state), job.error ? h('div', { class: 'sub error-text' }, job.error) : null),
    h('td', { class: 'progress-cell' }, jobProgress(job)),
    h(
      'td',
      {},
      gpus,
      h(
        'div',
        { class: 'sub' },
        spec.kind === 'inference'
          ? `inference: ${spec.serving?.engine || 'trtllm'}, ${num(spec.serving?.isl)} in / ${num(spec.serving?.osl)} out`
          : `seq ${num(spec.training?.seq_length)}, batch ${num(spec.training?.global_batch_size)}, ${spec.search?.mode || 'model'}`,
      ),
    ),
    h('td', {}, job.create_time ? new Date(job.create_time).toLocaleString() : '–'),
    h('td', {}, cancel),
  );
}

export function renderJobsPage(root: HTMLElement): () => void {
  const listStatus = h('div', { 'aria-live': 'polite' });
  const tbody = h('tbody');
  const table = h(
    'table',
    { class: 'data', id: 'jobs-table' },
    h('caption', { class: 'visually-hidden' }, 'Jobs, newest first'),
    h(
      'thead',
      {},
      h('tr', {}, ...['Job', 'State', 'Progress', 'Cluster', 'Created', ''].map((t) => h('th', { scope: 'col' }, t))),
    ),
    tbody,
  );
  const form = buildForm((job) => {
    location.hash = `#/jobs/${encodeURIComponent(job.id ?? '')}`;
  });
  root.append(
    h('h1', {}, 'Jobs'),
    h(
      'div',
      { class: 'jobs-layout' },
      form,
      h('section', { class: 'card', 'aria-labelledby': 'jobs-title' }, h('h2', { id: 'jobs-title' }, 'All jobs'), listStatus, h('div', { class: 'table-scroll' }, table)),
    ),
  );
  let last = '';
  return poll(async () => {
    try {
      const res = await api.listJobs();
      const jobs = [...(res.jobs ?? [])].sort((a, b) => (b.create_time ?? '').localeCompare(a.create_time ?? ''));
      const snapshot = JSON.stringify(jobs);
      if (snapshot !== last) {
        last = snapshot;
        clear(tbody);
        for (const job of jobs) tbody.append(jobRow(job));
        if (!jobs.length) tbody.append(h('tr', {}, h('td', { colspan: 6, class: 'empty' }, 'No jobs yet: submit one with the form.')));
      }
      clear(listStatus);
    } catch (e) {
      clear(listStatus);
      listStatus.append(errorBanner(e));
    }
  }, 1500);
}
