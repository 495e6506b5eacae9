// The results of an inference job (`kind: inference`) on the job page: the recommendation,
// the Pareto chart of output tokens/s per GPU against tokens/s per user with the limits as
// lines, the ranked serving layouts (sortable), the step-time and memory breakdowns of a
// selected layout, its engine exports, and the rejected layouts with their reasons. Every
// figure is the coordinator's (GET /v1/jobs/{id}/results: plan.inference).
import { barsOption, SERVING_MEMORY_PARTS, servingParetoOption, STEP_PARTS, type Chart, type UserRateLine } from '../charts';
import { append, clear, h } from '../dom';
import { fixed, num, servingLabel, thousands } from '../format';
import type { ExportFormat, InferenceRankedConfig, JobResults, JobSpec, LatencyLimits } from '../types';
import { type Column as ColumnOf, exportButton as exportButtonOf, renderSortHeader, sortByColumn, type SortState } from './common';

type Column = ColumnOf<InferenceRankedConfig, undefined>;

const ms = (v: number | undefined) => `${fixed(num(v), num(v) >= 100 ? 0 : 1)} ms`;

function memoryCell(r: InferenceRankedConfig): Node {
  const peak = num(r.memory?.peak);
  const cap = num(r.memory?.capacity);
  const frac = cap > 0 ? Math.min(1, peak / cap) : 0;
  const meter = h('span', { class: 'meter', 'aria-hidden': 'true' }, h('span', { style: `width:${(frac * 100).toFixed(1)}%` }));
  return h('span', { class: 'mem' }, `${fixed(peak, 1)} / ${fixed(cap, 0)} GiB`, meter);
}

const COLUMNS: Column[] = [
  { key: 'rank', label: 'Rank', title: 'rank by the objective (layouts meeting the limits first)', value: (r) => num(r.rank), cell: (r) => `#${num(r.rank)}`, firstDir: 'ascending', numeric: true },
  { key: 'config', label: 'Config', title: 'TP, PP, instances (or prefill:decode pools), max batch, max tokens per step, weight / KV-cache precision', value: (r) => servingLabel(r.config), cell: (r) => servingLabel(r.config), firstDir: 'ascending', numeric: false },
  { key: 'tps_gpu', label: 'Tok/s/GPU', title: 'output tokens per second per GPU', value: (r) => num(r.output_tokens_per_sec_per_gpu), cell: (r) => thousands(num(r.output_tokens_per_sec_per_gpu), 0), firstDir: 'descending', numeric: true },
  { key: 'tps_user', label: 'Tok/s/user', title: 'output tokens per second each user sees', value: (r) => num(r.tokens_per_sec_per_user), cell: (r) => fixed(num(r.tokens_per_sec_per_user), 1), firstDir: 'descending', numeric: true },
  { key: 'ttft_p50', label: 'TTFT p50', title: 'time to first token, median', value: (r) => num(r.ttft_ms?.p50), cell: (r) => ms(r.ttft_ms?.p50), firstDir: 'ascending', numeric: true },
  { key: 'ttft_p99', label: 'TTFT p99', title: 'time to first token, 99th percentile', value: (r) => num(r.ttft_ms?.p99), cell: (r) => ms(r.ttft_ms?.p99), firstDir: 'ascending', numeric: true },
  { key: 'tpot_p50', label: 'TPOT p50', title: 'time per output token after the first, median', value: (r) => num(r.tpot_ms?.p50), cell: (r) => ms(r.tpot_ms?.p50), firstDir: 'ascending', numeric: true },
  { key: 'tpot_p99', label: 'TPOT p99', title: 'time per output token after the first, 99th percentile', value: (r) => num(r.tpot_ms?.p99), cell: (r) => ms(r.tpot_ms?.p99), firstDir: 'ascending', numeric: true },
  { key: 'memory', label: 'Memory / GPU', title: 'peak memory of the most loaded GPU against its capacity', value: (r) => num(r.memory?.peak), cell: memoryCell, firstDir: 'ascending', numeric: true },
  { key: 'meets', label: 'Meets limits', title: 'within every TTFT, TPOT and tokens/s/user limit of the spec', value: (r) => (r.meets_limits ? 1 : 0), cell: (r) => h('span', { class: `tag ${r.meets_limits ? 'meets' : 'misses'}` }, r.meets_limits ? 'yes' : 'no'), firstDir: 'descending', numeric: true },
];

/** The tightest given percentile of a limit, e.g. ["p99", 50]. */
function tightest(limits: LatencyLimits | undefined): [string, number] | null {
  for (const p of ['p50', 'p90', 'p99'] as const) {
    if (limits?.[p] !== undefined && limits[p] !== null) return [p, num(limits[p])];
  }
  return null;
}

/**
 * The spec's limits on the tokens/s-per-user axis: min_tokens_per_sec_per_user as given, and
 * a TPOT limit of L ms as 1000 / L tokens/s per user (a user who waits L ms per token reads
 * 1000 / L tokens per second).
 */
export function userRateLines(spec: JobSpec | undefined): UserRateLine[] {
  const serving = spec?.serving ?? {};
  const lines: UserRateLine[] = [];
  if (serving.min_tokens_per_sec_per_user !== undefined && num(serving.min_tokens_per_sec_per_user) > 0) {
    lines.push({ x: num(serving.min_tokens_per_sec_per_user), label: `min ${num(serving.min_tokens_per_sec_per_user)} tok/s/user` });
  }
  const tpot = tightest(serving.tpot_ms);
  if (tpot && tpot[1] > 0) lines.push({ x: 1000 / tpot[1], label: `TPOT ${tpot[0]} ${tpot[1]} ms` });
  return lines;
}

type ChartBox = (name: string, label: string, cls: string) => { el: HTMLElement; chart: () => Chart };

export function renderInferenceResults(box: HTMLElement, res: JobResults, jobId: string, spec: JobSpec | undefined, chartBox: ChartBox): void {
  const plan = res.plan?.inference ?? {};
  const ranked = plan.ranked ?? [];
  const front = plan.pareto_front ?? [];
  const rejected = plan.rejected ?? [];
  box.append(
    h(
      'section',
      { class: 'card summary', 'aria-label': 'Search summary' },
      h('div', { class: 'stat' }, h('span', { class: 'stat-value', id: 'stat-considered' }, thousands(num(plan.candidates_considered))), h('span', { class: 'stat-label' }, 'serving layouts considered')),
      h('div', { class: 'stat' }, h('span', { class: 'stat-value', id: 'stat-feasible' }, thousands(num(plan.feasible))), h('span', { class: 'stat-label' }, 'feasible')),
      h('div', { class: 'stat' }, h('span', { class: 'stat-value', id: 'stat-ranked' }, String(ranked.length)), h('span', { class: 'stat-label' }, 'ranked')),
      h('div', { class: 'stat' }, h('span', { class: 'stat-value' }, `${fixed(num(plan.elapsed_ms), 0)} ms`), h('span', { class: 'stat-label' }, 'search time')),
    ),
  );
  if (plan.recommendation) box.append(h('p', { class: 'card', id: 'recommendation' }, plan.recommendation));

  const sort: SortState = { key: 'rank', dir: 'ascending' };
  let selected = 0;
  const thead = h('thead');
  const tbody = h('tbody');
  const table = h('table', { class: 'data ranked', id: 'inference-table' }, h('caption', { class: 'visually-hidden' }, 'Ranked serving layouts; the column buttons sort the table'), thead, tbody);
  const lines = userRateLines(spec);
  const pareto = chartBox('pareto', 'Scatter of output tokens/s per GPU against tokens/s per user, with the Pareto front and the limits', 'chart-scatter');
  pareto.el.dataset.pointCount = String(ranked.length);
  pareto.el.dataset.frontCount = String(front.length);
  pareto.el.dataset.limitLines = String(lines.length);

  const breakdownTitle = h('h2', { id: 'breakdown-title' });
  const facts = h('div', { class: 'breakdown-facts' });
  const exportButtons = h('div', { class: 'row exports', role: 'group', 'aria-label': 'Export the selected layout' });
  const exportStatus = h('div', { class: 'export-status', 'aria-live': 'polite' });
  const stepChart = chartBox('step', 'Stacked bars: prefill and decode step time breakdown', 'chart-bars');
  const memChart = chartBox('serving-memory', 'Stacked bars: memory per GPU against capacity', 'chart-bars');
  const breakdown = h(
    'section',
    { class: 'card breakdown', id: 'breakdown', 'aria-labelledby': 'breakdown-title' },
    breakdownTitle,
    facts,
    exportButtons,
    exportStatus,
    h('div', { class: 'two-col' }, h('div', {}, h('h3', {}, 'Time per engine step'), stepChart.el), h('div', {}, h('h3', {}, 'Memory per GPU'), memChart.el)),
  );

  const exportButton = (format: ExportFormat, label: string, position: number) =>
    exportButtonOf(`export-${format}`, res.job_id || jobId, position, format, label, exportStatus);

  const renderBreakdown = () => {
    const r = ranked[selected];
    breakdown.dataset.index = String(selected);
    breakdown.dataset.rank = String(num(r?.rank));
    clear(breakdownTitle);
    clear(facts);
    clear(exportButtons);
    clear(exportStatus);
    if (!r) return;
    breakdownTitle.append(`Layout #${num(r.rank)}: ${servingLabel(r.config)}`);
    append(facts, [
      h(
        'p',
        {},
        `${thousands(num(r.output_tokens_per_sec_per_gpu))} output tokens/s/GPU (${thousands(num(r.output_tokens_per_sec))} in all), ${fixed(num(r.tokens_per_sec_per_user), 1)} tokens/s per user, ${fixed(num(r.requests_per_sec), 2)} requests/s; `,
        `TTFT p50 ${ms(r.ttft_ms?.p50)} / p90 ${ms(r.ttft_ms?.p90)} / p99 ${ms(r.ttft_ms?.p99)}, TPOT p50 ${ms(r.tpot_ms?.p50)} / p99 ${ms(r.tpot_ms?.p99)}, end to end p99 ${ms(r.e2e_latency_ms?.p99)}; `,
        `up to ${thousands(num(r.max_concurrency))} sequences at once; peak ${fixed(num(r.memory?.peak), 1)} of ${fixed(num(r.memory?.capacity), 0)} GiB.`,
        r.cost_per_million_output_tokens !== undefined ? ` Cost: $${fixed(num(r.cost_per_million_output_tokens), 3)} per million output tokens.` : '',
      ),
      r.notes?.length ? h('ul', { class: 'notes', 'aria-label': 'Why this layout' }, ...r.notes.map((n) => h('li', {}, n))) : null,
    ]);
    const position = selected + 1;
    exportButtons.append(exportButton('trtllm', 'TensorRT-LLM options', position), exportButton('vllm', 'vllm serve arguments', position), exportButton('sglang', 'SGLang arguments', position), exportButton('json', 'JSON', position));
    stepChart.chart().setOption(
      barsOption(
        [
          { label: `#${num(r.rank)} prefill`, values: { ...r.prefill_step } as Record<string, number> },
          { label: `#${num(r.rank)} decode`, values: { ...r.decode_step } as Record<string, number> },
        ],
        STEP_PARTS,
        'ms',
        0,
      ),
      true,
    );
    const rows = [r, ...(selected === 0 || !ranked[0] ? [] : [ranked[0]])].map((x, i) => ({ label: `#${num(x.rank)}${i === 0 ? '' : ' (best)'}`, values: { ...x.memory } as Record<string, number> }));
    memChart.chart().setOption(barsOption(rows, SERVING_MEMORY_PARTS, 'GiB', num(r.memory?.capacity)), true);
  };

  const sorted = () => sortByColumn(ranked, COLUMNS, sort);

  const renderTable = () => {
    renderSortHeader(thead, COLUMNS, sort, renderTable);
    clear(tbody);
    for (const { r, i } of sorted()) {
      const isSel = i === selected;
      const row = h('tr', { 'data-index': i, 'data-rank': num(r.rank), class: isSel ? 'selected' : '', 'aria-selected': isSel ? 'true' : 'false', onclick: () => select(i) });
      for (const col of COLUMNS) {
        const content = col.key === 'rank' ? h('button', { type: 'button', class: 'row-select', 'aria-label': `Show breakdown of layout #${num(r.rank)}`, 'aria-pressed': isSel ? 'true' : 'false' }, col.cell(r, undefined)) : col.cell(r, undefined);
        row.append(h('td', { 'data-col': col.key, 'data-value': col.value(r), class: col.numeric ? 'num' : '' }, content));
      }
      tbody.append(row);
    }
  };

  const select = (i: number) => {
    selected = i;
    renderTable();
    pareto.chart().setOption(servingParetoOption(ranked, front, selected, lines), true);
    renderBreakdown();
  };

  if (ranked.length) {
    box.append(
      h(
        'section',
        { class: 'card', 'aria-labelledby': 'pareto-title' },
        h('h2', { id: 'pareto-title' }, 'Throughput per GPU against speed per user'),
        h('p', { class: 'hint' }, `${ranked.length} ranked layouts (red: misses a limit); ${front.length} on the Pareto front of every feasible layout (none is both faster per GPU and faster per user). Dashed lines: the limits in tokens/s per user (a TPOT limit of L ms is 1000 / L).`),
        pareto.el,
      ),
      h('section', { class: 'card', 'aria-labelledby': 'ranked-title' }, h('h2', { id: 'ranked-title' }, 'Ranked serving layouts'), h('p', { class: 'hint' }, 'Click a column to sort, a row to see its breakdown.'), h('div', { class: 'table-scroll' }, table)),
      breakdown,
    );
    renderTable();
    const chart = pareto.chart();
    chart.setOption(servingParetoOption(ranked, front, selected, lines), true);
    chart.on('click', (p: { value?: unknown }) => {
      const value = p.value as number[] | undefined;
      if (value && typeof value[2] === 'number') select(value[2]);
    });
    renderBreakdown();
  } else {
    box.append(h('section', { class: 'card' }, h('h2', {}, 'No serving layout fits'), h('p', {}, 'Every layout was rejected; the reasons are below.')));
  }

  const total = Math.max(num(plan.rejected_total), rejected.length);
  const reasons = Object.entries(plan.rejected_reasons ?? {})
    .map(([rule, count]): [string, number] => [rule, num(count)])
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  box.append(
    h(
      'section',
      { class: 'card', id: 'rejected', 'aria-labelledby': 'rejected-title', 'data-count': rejected.length, 'data-total': total },
      h('h2', { id: 'rejected-title' }, `Rejected layouts (${thousands(total)})`),
      total
        ? h(
            'div',
            {},
            h('h3', {}, 'By rule'),
            h('div', { class: 'table-scroll' }, h('table', { class: 'data compact', id: 'rejected-rules' }, h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Count'), h('th', { scope: 'col' }, 'Rule'))), h('tbody', {}, ...reasons.map(([rule, count]) => h('tr', {}, h('td', { class: 'num' }, String(count)), h('td', {}, rule)))))),
            h('h3', {}, total > rejected.length ? `Layouts (${thousands(rejected.length)} of them)` : 'Layouts'),
            h('div', { class: 'table-scroll' }, h('table', { class: 'data compact', id: 'rejected-table' }, h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Layout'), h('th', { scope: 'col' }, 'Rule'), h('th', { scope: 'col' }, 'Reason'))), h('tbody', {}, ...rejected.map((r) => h('tr', {}, h('td', { class: 'mono' }, servingLabel(r.config)), h('td', {}, r.rule ?? ''), h('td', {}, r.reason ?? '')))))),
          )
        : h('p', {}, 'None.'),
    ),
  );
}
