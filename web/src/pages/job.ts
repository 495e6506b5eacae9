// The job page: state and progress, the ranked layouts (sortable), the throughput/memory
// scatter with the Pareto frontier, the breakdowns of a selected layout, the rejected
// layouts with their reasons, and the exports.
import { api } from '../api';
import {
  createChart,
  disposeChart,
  memoryOption,
  scatterOption,
  timeOption,
  type Chart,
} from '../charts';
import { paretoFrontier, pointsOf } from '../analysis';
import { append, clear, h } from '../dom';
import { adaptive, fixed, isTerminal, layoutLabel, num, seconds, thousands } from '../format';
import type { ExportFormat, Job, JobResults, JobSpec, LatencyLimits, RankedConfig, Verification } from '../types';
import { type Column as ColumnOf, errorBanner, exportButton as exportButtonOf, jobProgress, jobTitle, poll, renderSortHeader, sortByColumn, type SortState, stateBadge } from './common';
import { renderInferenceResults } from './inference';

/** The cell renderer's extra argument: the device capacity (GiB). */
type Column = ColumnOf<RankedConfig, number>;

const yesNo = (b: boolean | undefined) => (b ? 'yes' : 'no');

/** (predicted − measured) / measured, signed, in percent. */
/** The timed steps' range (after the first, which warms up), e.g. " (steps 994.0 ms–994.8 ms)". */
function stepSpread(v: Verification): string {
  const timed = (v.measured_step_seconds ?? []).slice(1).map((s) => num(s));
  if (timed.length < 2) return '';
  return ` (steps ${seconds(Math.min(...timed))}–${seconds(Math.max(...timed))})`;
}

function errorPercent(predicted: number, measured: number): string {
  if (!(measured > 0)) return 'n/a';
  const e = ((predicted - measured) / measured) * 100;
  return `${e >= 0 ? '+' : ''}${fixed(e, 1)} % error`;
}

/** The predicted peak on the measurement's footing; results stored before it existed use the whole peak. */
function trackedPeak(v: Verification): number {
  return num(v.predicted_tracked_peak_gib) || num(v.predicted_peak_gib);
}

function memoryCell(r: RankedConfig, capacity: number): Node {
  const peak = num(r.memory?.peak_gib);
  const cap = num(r.memory?.capacity_gib) || capacity;
  const frac = cap > 0 ? Math.min(1, peak / cap) : 0;
  const meter = h('span', { class: 'meter', 'aria-hidden': 'true' }, h('span', { class: r.fits === false ? 'over' : '', style: `width:${(frac * 100).toFixed(1)}%` }));
  return h('span', { class: 'mem' }, `${fixed(peak, 1)} / ${fixed(cap, 0)} GiB`, meter);
}

const COLUMNS: Column[] = [
  { key: 'rank', label: 'Rank', title: 'rank by the objective', value: (r) => num(r.rank), cell: (r) => `#${num(r.rank)}`, firstDir: 'ascending', numeric: true },
  { key: 'tp', label: 'TP', title: 'tensor parallel size', value: (r) => num(r.config?.tp, 1), cell: (r) => String(num(r.config?.tp, 1)), firstDir: 'ascending', numeric: true },
  { key: 'pp', label: 'PP', title: 'pipeline parallel size', value: (r) => num(r.config?.pp, 1), cell: (r) => String(num(r.config?.pp, 1)), firstDir: 'ascending', numeric: true },
  { key: 'vp', label: 'VP', title: 'virtual pipeline stages per GPU (interleaving)', value: (r) => num(r.config?.vp, 1), cell: (r) => String(num(r.config?.vp, 1)), firstDir: 'ascending', numeric: true },
  { key: 'dp', label: 'DP', title: 'data parallel size', value: (r) => num(r.config?.dp, 1), cell: (r) => String(num(r.config?.dp, 1)), firstDir: 'ascending', numeric: true },
  { key: 'cp', label: 'CP', title: 'context parallel size', value: (r) => num(r.config?.cp, 1), cell: (r) => String(num(r.config?.cp, 1)), firstDir: 'ascending', numeric: true },
  { key: 'sp', label: 'SP', title: 'sequence parallelism', value: (r) => (r.config?.sequence_parallel ? 1 : 0), cell: (r) => yesNo(r.config?.sequence_parallel), firstDir: 'descending', numeric: true },
  { key: 'mb', label: 'Micro-batch', title: 'micro-batch size (sequences)', value: (r) => num(r.config?.micro_batch_size, 1), cell: (r) => String(num(r.config?.micro_batch_size, 1)), firstDir: 'ascending', numeric: true },
  {
    key: 'recompute',
    label: 'Recompute',
    title: 'activation recomputation',
    value: (r) => r.config?.recompute || 'none',
    cell: (r) => {
      const rc = r.config?.recompute || 'none';
      return rc === 'full' ? `full (${num(r.config?.recompute_num_layers, 1)})` : rc;
    },
    firstDir: 'ascending',
    numeric: false,
  },
  { key: 'distopt', label: 'Dist. opt.', title: 'distributed optimizer (optimizer state sharded over DP)', value: (r) => (r.config?.distributed_optimizer ? 1 : 0), cell: (r) => yesNo(r.config?.distributed_optimizer), firstDir: 'descending', numeric: true },
  { key: 'iter', label: 'Iteration', title: 'seconds per iteration', value: (r) => num(r.iteration_time_s), cell: (r) => seconds(num(r.iteration_time_s)), firstDir: 'ascending', numeric: true },
  { key: 'tokens', label: 'Tokens/s/GPU', title: 'training throughput per GPU', value: (r) => num(r.tokens_per_sec_per_gpu), cell: (r) => thousands(num(r.tokens_per_sec_per_gpu)), firstDir: 'descending', numeric: true },
  { key: 'tflops', label: 'TFLOP/s/GPU', title: 'model TFLOP/s per GPU', value: (r) => num(r.model_tflops_per_gpu), cell: (r) => adaptive(num(r.model_tflops_per_gpu), 1), firstDir: 'descending', numeric: true },
  { key: 'mfu', label: 'MFU', title: 'model FLOPs utilisation', value: (r) => num(r.mfu), cell: (r) => `${fixed(num(r.mfu) * 100, 1)} %`, firstDir: 'descending', numeric: true },
  { key: 'memory', label: 'Peak mem. / GPU', title: 'peak memory of the most loaded GPU against its capacity', value: (r) => num(r.memory?.peak_gib), cell: memoryCell, firstDir: 'ascending', numeric: true },
  { key: 'source', label: 'Source', title: 'measured by workers or modelled', value: (r) => r.source || 'modelled', cell: (r) => h('span', { class: `tag ${r.source === 'measured' ? 'measured' : 'modelled'}` }, r.source || 'modelled'), firstDir: 'ascending', numeric: false },
];

/** Rejection reasons with the numbers masked, so that similar ones group together. */
function reasonGroups(rejected: { reason?: string }[]): [string, number][] {
  const counts = new Map<string, number>();
  for (const r of rejected) {
    const key = (r.reason || 'no reason given').replace(/\d+(\.\d+)?/g, 'N');
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts.entries()].sort((a, b) => b[1] - a[1]);
}

/** An inference job's workload and limits in words. */
function servingFacts(spec: JobSpec): string {
  const s = spec.serving ?? {};
  const load = s.concurrency !== undefined ? `${num(s.concurrency)} concurrent clients` : s.request_rate !== undefined ? `${num(s.request_rate)} requests/s` : 'offline (all requests at once)';
  const limit = (name: string, l: LatencyLimits | undefined) =>
    (['p50', 'p90', 'p99'] as const).filter((p) => l?.[p] !== undefined).map((p) => `${name} ${p} ≤ ${num(l?.[p])} ms`);
  const limits = [...limit('TTFT', s.ttft_ms), ...limit('TPOT', s.tpot_ms)];
  return `${s.engine || 'trtllm'}, ${num(s.isl)} in / ${num(s.osl)} out tokens, ${load}${limits.length ? `; ${limits.join(', ')}` : ''}`;
}

export function renderJobPage(root: HTMLElement, jobId: string): () => void {
  const headerBox = h('section', { class: 'card job-header', 'aria-live': 'polite' });
  const resultsBox = h('div', { class: 'results' });
  root.append(h('p', { class: 'crumbs' }, h('a', { href: '#/jobs' }, '← Jobs')), headerBox, resultsBox);

  let job: Job | null = null;
  let results: JobResults | null = null;
  let resultsRequested = false;
  const charts: { name: string; chart: Chart }[] = [];
  const observers: ResizeObserver[] = [];

  const renderHeader = () => {
    clear(headerBox);
    if (!job) return;
    const spec = job.spec ?? {};
    const model = spec.model ?? {};
    const modelName = model.name || model.preset || (model.hf_config_json ? 'Hugging Face config.json' : '?');
    const cancel = isTerminal(job.state)
      ? null
      : h('button', { type: 'button', id: 'cancel-job', onclick: () => void api.cancelJob(jobId).catch(() => undefined) }, 'Cancel job');
    append(headerBox, [
      h('div', { class: 'row spread' }, h('h1', {}, jobTitle(job)), h('div', { class: 'row' }, stateBadge(job.state), cancel)),
      h(
        'dl',
        { class: 'facts' },
        h('dt', {}, 'Job'), h('dd', { class: 'mono' }, job.id ?? ''),
        h('dt', {}, 'Model'), h('dd', {}, modelName),
        h('dt', {}, 'Cluster'), h('dd', {}, `${num(spec.cluster?.num_gpus)} × ${spec.cluster?.gpu ?? '?'} (${num(spec.cluster?.gpus_per_node, 8) || 8} per node)`),
        ...(spec.kind === 'inference'
          ? [h('dt', {}, 'Serving'), h('dd', { id: 'serving-facts' }, servingFacts(spec))]
          : [h('dt', {}, 'Training'), h('dd', {}, `sequence ${num(spec.training?.seq_length)}, global batch ${num(spec.training?.global_batch_size)}, ${spec.training?.precision || 'bf16'}`)]),
        h('dt', {}, 'Mode'), h('dd', {}, spec.search?.mode || 'model'),
      ),
      jobProgress(job),
      job.error ? h('div', { class: 'error', role: 'alert' }, job.error) : null,
    ]);
  };

  const disposeCharts = () => {
    observers.forEach((o) => o.disconnect());
    observers.length = 0;
    charts.forEach(({ name, chart }) => disposeChart(chart, name));
    charts.length = 0;
  };

  const chartBox = (name: string, label: string, cls: string): { el: HTMLElement; chart: () => Chart } => {
    const el = h('div', { class: `chart ${cls}`, id: `chart-${name}`, role: 'img', 'aria-label': label });
    let chart: Chart | null = null;
    return {
      el,
      chart: () => {
        if (!chart) {
          chart = createChart(el, name);
          charts.push({ name, chart });
          const c = chart;
          const ro = new ResizeObserver(() => c.resize());
          ro.observe(el);
          observers.push(ro);
        }
        return chart;
      },
    };
  };

  const renderResults = (res: JobResults) => {
    disposeCharts();
    clear(resultsBox);
    if (res.plan?.inference) {
      renderInferenceResults(resultsBox, res, jobId, job?.spec, chartBox);
      return;
    }
    const plan = res.plan ?? {};
    const ranked = plan.ranked ?? [];
    const rejected = plan.rejected ?? [];
    const capacity = num(ranked.find((r) => num(r.memory?.capacity_gib) > 0)?.memory?.capacity_gib);
    resultsBox.append(
      h(
        'section',
        { class: 'card summary', 'aria-label': 'Search summary' },
        h('div', { class: 'stat' }, h('span', { class: 'stat-value', id: 'stat-considered' }, thousands(num(plan.candidates_considered))), h('span', { class: 'stat-label' }, 'layouts considered')),
        h('div', { class: 'stat' }, h('span', { class: 'stat-value', id: 'stat-feasible' }, thousands(num(plan.feasible))), h('span', { class: 'stat-label' }, 'feasible')),
        h('div', { class: 'stat' }, h('span', { class: 'stat-value', id: 'stat-ranked' }, String(ranked.length)), h('span', { class: 'stat-label' }, 'ranked')),
        h('div', { class: 'stat' }, h('span', { class: 'stat-value' }, `${fixed(num(plan.elapsed_ms), 0)} ms`), h('span', { class: 'stat-label' }, 'search time')),
      ),
    );
    const summary = plan.verification_summary;
    if (summary?.verdict) {
      resultsBox.append(h('p', { class: 'card', id: 'verification-summary' }, `End-to-end verification of the ranking: ${summary.verdict}.`));
    }
    if (!ranked.length) {
      resultsBox.append(h('section', { class: 'card' }, h('h2', {}, 'No layout fits'), h('p', {}, 'Every layout was rejected; the reasons are below.')));
    }

    const sort: SortState = { key: 'rank', dir: 'ascending' };
    let selected = 0;

    // --- ranked table
    const thead = h('thead');
    const tbody = h('tbody');
    const table = h('table', { class: 'data ranked', id: 'ranked-table' }, h('caption', { class: 'visually-hidden' }, 'Ranked layouts; the column buttons sort the table'), thead, tbody);

    const sortedRanked = () => sortByColumn(ranked, COLUMNS, sort);

    const renderTable = () => {
      renderSortHeader(thead, COLUMNS, sort, renderTable);
      clear(tbody);
      for (const { r, i } of sortedRanked()) {
        const isSel = i === selected;
        const row = h('tr', {
          'data-index': i,
          'data-rank': num(r.rank),
          class: isSel ? 'selected' : '',
          'aria-selected': isSel ? 'true' : 'false',
          onclick: (ev: Event) => {
            if ((ev.target as HTMLElement).closest('button')) return;
            select(i);
          },
        });
        for (const col of COLUMNS) {
          const v = col.value(r);
          const content =
            col.key === 'rank'
              ? h('button', { type: 'button', class: 'row-select', 'aria-label': `Show breakdown of layout #${num(r.rank)}`, 'aria-pressed': isSel ? 'true' : 'false', onclick: () => select(i) }, col.cell(r, capacity))
              : col.cell(r, capacity);
          row.append(h('td', { 'data-col': col.key, 'data-value': v, class: col.numeric ? 'num' : '' }, content));
        }
        tbody.append(row);
      }
    };

    // --- scatter
    const scatter = chartBox('scatter', 'Scatter of throughput against peak memory per GPU, with the Pareto frontier and the memory capacity', 'chart-scatter');
    const frontier = paretoFrontier(pointsOf(ranked));
    scatter.el.dataset.pointCount = String(ranked.length);
    scatter.el.dataset.frontierCount = String(frontier.length);

    // --- breakdown
    const breakdownTitle = h('h2', { id: 'breakdown-title' });
    const breakdownFacts = h('div', { class: 'breakdown-facts' });
    const timeChart = chartBox('time', 'Stacked bars: iteration time breakdown', 'chart-bars');
    const memChart = chartBox('memory', 'Stacked bars: memory breakdown against capacity', 'chart-bars');
    const exportStatus = h('div', { class: 'export-status', 'aria-live': 'polite' });
    const exportButtons = h('div', { class: 'row exports', role: 'group', 'aria-label': 'Export the selected layout' });
    const breakdown = h(
      'section',
      { class: 'card breakdown', id: 'breakdown', 'aria-labelledby': 'breakdown-title' },
      breakdownTitle,
      breakdownFacts,
      exportButtons,
      exportStatus,
      h('div', { class: 'two-col' }, h('div', {}, h('h3', {}, 'Time per iteration'), timeChart.el), h('div', {}, h('h3', {}, 'Memory per GPU'), memChart.el)),
    );

    // The coordinator renders exports (the same text as `paratune export`); the page downloads them.
    const exportButton = (id: string, format: ExportFormat, label: string, position: number) =>
      exportButtonOf(id, res.job_id || jobId, position, format, label, exportStatus);

    const renderBreakdown = () => {
      const r = ranked[selected];
      breakdown.dataset.index = String(selected);
      breakdown.dataset.rank = String(num(r?.rank));
      breakdown.dataset.tp = String(num(r?.config?.tp, 1));
      clear(breakdownTitle);
      clear(breakdownFacts);
      clear(exportButtons);
      clear(exportStatus);
      if (!r) return;
      breakdownTitle.append(`Layout #${num(r.rank)}: ${layoutLabel(r.config)}`);
      const t = r.time ?? {};
      const parts = [t.compute, t.tp_comm, t.cp_comm, t.ep_comm, t.pp_bubble, t.pp_p2p, t.dp_comm, t.optimizer, t.offload].map((v) => num(v));
      const sum = parts.reduce((a, b) => a + b, 0);
      const v = r.verification;
      append(breakdownFacts, [
        h(
          'p',
          {},
          `${seconds(num(r.iteration_time_s))} per iteration (parts add up to ${seconds(sum)}), `,
          `${thousands(num(r.tokens_per_sec_per_gpu))} tokens/s/GPU, MFU ${fixed(num(r.mfu) * 100, 1)} %, `,
          `peak ${fixed(num(r.memory?.peak_gib), 1)} of ${fixed(num(r.memory?.capacity_gib) || capacity, 0)} GiB, ${r.source || 'modelled'}.`,
          num(r.time_to_train_days) > 0 ? ` Time to train: ${fixed(num(r.time_to_train_days), 1)} days.` : '',
        ),
        v && v.status === 'verified'
          ? h('p', { id: 'verification' }, `Trained end to end on ${v.measured_peak_gib_per_rank?.length ?? 0} ranks: measured ${seconds(num(v.measured_iteration_time_s))}${stepSpread(v)} vs predicted ${seconds(num(v.predicted_iteration_time_s))} per iteration (${errorPercent(num(v.predicted_iteration_time_s), num(v.measured_iteration_time_s))}); peak ${fixed(num(v.measured_peak_gib), 3)} vs ${fixed(trackedPeak(v), 3)} GiB predicted as the trainer allocates (${errorPercent(trackedPeak(v), num(v.measured_peak_gib))}; ${fixed(num(v.predicted_peak_gib), 3)} GiB with the framework).`)
          : v && v.status
            ? h('p', { id: 'verification' }, `Verification: ${v.status}`)
            : null,
        r.notes?.length ? h('ul', { class: 'notes', 'aria-label': 'Why this layout' }, ...r.notes.map((n) => h('li', {}, n))) : null,
      ]);
      // Exports address a layout by its position in the ranking (1 = first), as `paratune export --rank` does.
      const position = selected + 1;
      exportButtons.append(
          exportButton('export-megatron', 'megatron', 'Megatron arguments', position),
          exportButton('export-nemo', 'nemo', 'NeMo config', position),
          exportButton('export-deepspeed', 'deepspeed', 'DeepSpeed config', position),
          exportButton('export-torchtitan', 'torchtitan', 'torchtitan TOML', position),
          exportButton('export-automodel', 'automodel', 'NeMo AutoModel YAML', position),
          exportButton('export-json', 'json', 'JSON', position),
      );
      const compare = selected === 0 || !ranked[0] ? [r] : [r, ranked[0]];
      timeChart.chart().setOption(timeOption(compare), true);
      memChart.chart().setOption(memoryOption(compare, num(r.memory?.capacity_gib) || capacity), true);
    };

    const select = (i: number) => {
      selected = i;
      renderTable();
      scatter.chart().setOption(scatterOption(ranked, selected, capacity), true);
      renderBreakdown();
      (tbody.querySelector(`tr[data-index="${i}"] button.row-select`) as HTMLButtonElement | null)?.focus({ preventScroll: true });
    };

    if (ranked.length) {
      resultsBox.append(
        h('section', { class: 'card', 'aria-labelledby': 'ranked-title' }, h('h2', { id: 'ranked-title' }, 'Ranked layouts'), h('p', { class: 'hint' }, 'Click a column to sort, a row to see its breakdown.'), h('div', { class: 'table-scroll' }, table)),
        h(
          'section',
          { class: 'card', 'aria-labelledby': 'scatter-title' },
          h('h2', { id: 'scatter-title' }, 'Throughput against memory'),
          h('p', { class: 'hint' }, `${ranked.length} layouts; ${frontier.length} on the Pareto frontier (nothing else is both faster and smaller). The dashed line is the memory capacity.`),
          scatter.el,
        ),
        breakdown,
      );
      renderTable();
      const sc = scatter.chart();
      sc.setOption(scatterOption(ranked, selected, capacity), true);
      sc.on('click', (p: { value?: unknown }) => {
        const value = p.value as number[] | undefined;
        if (value && typeof value[2] === 'number') select(value[2]);
      });
      renderBreakdown();
    }

    // --- rejected
    const rejectedList = h('tbody');
    let shown = 0;
    const more = h('button', { type: 'button', id: 'rejected-more' });
    const showMore = (n: number) => {
      const next = rejected.slice(shown, shown + n);
      for (const rej of next) rejectedList.append(h('tr', {}, h('td', { class: 'mono' }, layoutLabel(rej.config)), h('td', {}, rej.reason || '')));
      shown += next.length;
      more.textContent = `Show ${Math.min(200, rejected.length - shown)} more (${thousands(shown)} of ${thousands(rejected.length)} shown)`;
      more.hidden = shown >= rejected.length;
    };
    more.addEventListener('click', () => showMore(200));
    // The coordinator lists the first rejected layouts and counts all of them per rule.
    const rejectedTotal = Math.max(num(plan.rejected_total), rejected.length);
    const groups: [string, number][] = plan.rejected_reasons?.length
      ? plan.rejected_reasons.map((r): [string, number] => [r.reason || 'no reason given', num(r.count)])
      : reasonGroups(rejected);
    resultsBox.append(
      h(
        'section',
        { class: 'card', id: 'rejected', 'aria-labelledby': 'rejected-title', 'data-count': rejected.length, 'data-total': rejectedTotal },
        h('h2', { id: 'rejected-title' }, `Rejected layouts (${thousands(rejectedTotal)})`),
        rejectedTotal
          ? h(
              'div',
              {},
              h('h3', {}, 'Most common reasons'),
              h('div', { class: 'table-scroll' }, h('table', { class: 'data compact' }, h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Count'), h('th', { scope: 'col' }, 'Reason (numbers as N)'))), h('tbody', {}, ...groups.slice(0, 12).map(([reason, n]) => h('tr', {}, h('td', { class: 'num' }, String(n)), h('td', {}, reason)))))),
              h('h3', {}, rejectedTotal > rejected.length ? `Layouts (the first ${thousands(rejected.length)})` : 'Layouts'),
              h('div', { class: 'table-scroll' }, h('table', { class: 'data compact', id: 'rejected-table' }, h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Layout'), h('th', { scope: 'col' }, 'Reason'))), rejectedList)),
              more,
            )
          : h('p', {}, 'None.'),
      ),
    );
    showMore(25);
  };

  const stop = poll(async () => {
    try {
      job = await api.getJob(jobId);
      renderHeader();
    } catch (e) {
      clear(headerBox);
      headerBox.append(h('h1', {}, `Job ${jobId}`), errorBanner(e));
      return (e as { httpStatus?: number }).httpStatus !== 404;
    }
    if (job.state === 'JOB_STATE_SUCCEEDED' && !resultsRequested) {
      resultsRequested = true;
      try {
        results = await api.getResults(jobId);
        renderResults(results);
      } catch (e) {
        resultsRequested = false;
        clear(resultsBox);
        resultsBox.append(errorBanner(e));
      }
    }
    return !isTerminal(job.state) || (job.state === 'JOB_STATE_SUCCEEDED' && !resultsRequested);
  }, 1500);

  return () => {
    stop();
    disposeCharts();
  };
}
