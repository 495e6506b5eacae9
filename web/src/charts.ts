// ECharts (bundled, tree-shaken): the throughput/memory scatter and the breakdown bars.
import { BarChart, LineChart, ScatterChart } from 'echarts/charts';
import {
  AriaComponent,
  GridComponent,
  LegendComponent,
  MarkLineComponent,
  TooltipComponent,
} from 'echarts/components';
import * as echarts from 'echarts/core';
import { CanvasRenderer } from 'echarts/renderers';
import { paretoFrontier, pointsOf } from './analysis';
import { layoutLabel, num, servingLabel } from './format';
import type { InferenceRankedConfig, RankedConfig } from './types';

echarts.use([AriaComponent, ScatterChart, LineChart, BarChart, GridComponent, LegendComponent, MarkLineComponent, TooltipComponent, CanvasRenderer]);

export type Chart = echarts.ECharts;

/** Charts by name, for tests and debugging: window.paratune.charts.scatter.getOption(). */
declare global {
  interface Window {
    paratune?: { charts: Record<string, Chart> };
  }
}

const TEXT = '#1f2328';
const MUTED = '#57606a';
const FONT = { color: TEXT, fontFamily: 'system-ui, sans-serif' };

export function createChart(el: HTMLElement, name: string): Chart {
  const chart = echarts.init(el, undefined, { renderer: 'canvas' });
  window.paratune ??= { charts: {} };
  window.paratune.charts[name] = chart;
  return chart;
}

export function disposeChart(chart: Chart, name: string): void {
  if (window.paratune?.charts[name] === chart) delete window.paratune.charts[name];
  chart.dispose();
}

/** Scatter of tokens/s/GPU against peak memory, with the Pareto frontier and capacity. */
export function scatterOption(ranked: RankedConfig[], selected: number, capacity: number): echarts.EChartsCoreOption {
  const points = pointsOf(ranked);
  const frontier = paretoFrontier(points);
  const maxMem = Math.max(capacity, ...points.map((p) => p.memory));
  const data = points.map((p) => ({
    value: [p.memory, p.throughput, p.index],
    itemStyle: { color: ranked[p.index].fits === false ? '#cf222e' : '#0969da' },
  }));
  return {
    textStyle: FONT,
    animation: false,
    aria: { enabled: true },
    grid: { left: 56, right: 24, top: 64, bottom: 52 },
    legend: { top: 0, left: 'center', textStyle: { color: TEXT }, data: ['Layouts', 'Pareto frontier', 'Selected'] },
    tooltip: {
      trigger: 'item',
      formatter: (p: { seriesName: string; value: number[] }) => {
        const r = ranked[p.value[2]];
        if (!r) return p.seriesName;
        return `#${num(r.rank)} ${layoutLabel(r.config)}<br/>${p.value[1].toFixed(0)} tokens/s/GPU<br/>${p.value[0].toFixed(1)} GiB peak`;
      },
    },
    xAxis: {
      type: 'value',
      name: 'peak memory per GPU (GiB)',
      nameLocation: 'middle',
      nameGap: 30,
      min: 0,
      max: Math.ceil((maxMem * 1.05) / 10) * 10,
      axisLabel: { color: MUTED },
      nameTextStyle: { color: TEXT },
    },
    yAxis: {
      type: 'value',
      name: 'tokens/s/GPU',
      scale: true,
      axisLabel: { color: MUTED },
      nameTextStyle: { color: TEXT },
    },
    series: [
      {
        name: 'Layouts',
        type: 'scatter',
        symbolSize: 11,
        data,
        markLine:
          capacity > 0
            ? {
                symbol: 'none',
                silent: true,
                lineStyle: { color: '#cf222e', type: 'dashed', width: 2 },
                label: { formatter: `capacity ${capacity.toFixed(0)} GiB`, color: '#a40e26', position: 'insideEndTop' },
                data: [{ xAxis: capacity }],
              }
            : undefined,
      },
      {
        name: 'Pareto frontier',
        type: 'line',
        step: 'end',
        symbol: 'none',
        silent: true,
        lineStyle: { color: '#8250df', width: 2 },
        itemStyle: { color: '#8250df' },
        data: frontier.map((p) => [p.memory, p.throughput, p.index]),
      },
      {
        name: 'Selected',
        type: 'scatter',
        symbol: 'diamond',
        symbolSize: 20,
        itemStyle: { color: '#f5b800', borderColor: TEXT, borderWidth: 1.5 },
        data: points[selected] ? [[points[selected].memory, points[selected].throughput, selected]] : [],
        z: 5,
      },
    ],
  };
}

export const TIME_PARTS: [keyof NonNullable<RankedConfig['time']>, string, string][] = [
  ['compute', 'compute', '#0969da'],
  ['tp_comm', 'TP comm', '#8250df'],
  ['cp_comm', 'CP comm', '#bf3989'],
  ['ep_comm', 'EP dispatch/combine', '#9a6700'],
  ['pp_bubble', 'PP bubble', '#cf222e'],
  ['pp_p2p', 'PP p2p', '#bc4c00'],
  ['dp_comm', 'DP comm', '#1a7f37'],
  ['optimizer', 'optimizer', '#57606a'],
  ['offload', 'activation offload', '#4d2d00'],
];

export const MEMORY_PARTS: [keyof NonNullable<RankedConfig['memory']>, string, string][] = [
  ['weights', 'weights', '#0969da'],
  ['gradients', 'gradients', '#8250df'],
  ['optimizer', 'optimizer', '#1a7f37'],
  ['activations', 'activations', '#bc4c00'],
  ['other', 'other', '#57606a'],
];

/** Horizontal stacked bars, one bar per layout. */
function stackedOption(
  layouts: RankedConfig[],
  parts: [string, string, string][],
  value: (r: RankedConfig, key: string) => number,
  unit: string,
  capacity: number,
): echarts.EChartsCoreOption {
  const categories = layouts.map((r, i) => (layouts.length > 1 ? `#${num(r.rank)}${i === 0 ? ' (selected)' : ' (best)'}` : `#${num(r.rank)}`));
  return {
    textStyle: FONT,
    animation: false,
    aria: { enabled: true },
    grid: { left: 8, right: 32, top: 72, bottom: 44, containLabel: true },
    legend: { top: 4, textStyle: { color: TEXT }, itemWidth: 14 },
    tooltip: { trigger: 'axis', axisPointer: { type: 'shadow' }, valueFormatter: (v: number) => `${Number(v).toFixed(3)} ${unit}` },
    xAxis: { type: 'value', name: unit, nameLocation: 'middle', nameGap: 26, axisLabel: { color: MUTED }, nameTextStyle: { color: TEXT }, max: capacity > 0 ? (v: { max: number }) => Math.ceil((Math.max(v.max, capacity) * 1.05) / 10) * 10 : undefined },
    yAxis: { type: 'category', data: categories, inverse: true, axisLabel: { color: TEXT } },
    series: parts.map(([key, label, color], i) => ({
      name: label,
      type: 'bar',
      stack: 'total',
      barMaxWidth: 36,
      itemStyle: { color },
      data: layouts.map((r) => value(r, key)),
      markLine:
        i === 0 && capacity > 0
          ? {
              symbol: 'none',
              silent: true,
              lineStyle: { color: '#cf222e', type: 'dashed', width: 2 },
              label: { formatter: `capacity ${capacity.toFixed(0)} GiB`, color: '#a40e26', position: 'start' },
              data: [{ xAxis: capacity }],
            }
          : undefined,
    })),
  };
}

export function timeOption(layouts: RankedConfig[]): echarts.EChartsCoreOption {
  return stackedOption(layouts, TIME_PARTS, (r, k) => num((r.time as Record<string, number> | undefined)?.[k]), 's', 0);
}

export function memoryOption(layouts: RankedConfig[], capacity: number): echarts.EChartsCoreOption {
  return stackedOption(layouts, MEMORY_PARTS, (r, k) => num((r.memory as Record<string, number> | undefined)?.[k]), 'GiB', capacity);
}

// --- inference jobs

/** A vertical guide on the serving Pareto chart: a limit in tokens/s per user. */
export interface UserRateLine {
  x: number;
  label: string;
}

/**
 * Output tokens/s per GPU against tokens/s per user for every ranked serving layout (red:
 * misses the limits), the planner's Pareto front, the selected layout, and the limits as
 * vertical lines.
 */
export function servingParetoOption(ranked: InferenceRankedConfig[], front: InferenceRankedConfig[], selected: number, lines: UserRateLine[]): echarts.EChartsCoreOption {
  const data = ranked.map((r, i) => ({
    value: [num(r.tokens_per_sec_per_user), num(r.output_tokens_per_sec_per_gpu), i],
    itemStyle: { color: r.meets_limits === false ? '#cf222e' : '#0969da' },
  }));
  const frontData = [...front]
    .map((r) => [num(r.tokens_per_sec_per_user), num(r.output_tokens_per_sec_per_gpu)])
    .sort((a, b) => a[0] - b[0]);
  const sel = ranked[selected];
  const maxX = Math.max(...ranked.map((r) => num(r.tokens_per_sec_per_user)), ...front.map((r) => num(r.tokens_per_sec_per_user)), ...lines.map((l) => l.x), 1);
  return {
    textStyle: FONT,
    animation: false,
    aria: { enabled: true },
    grid: { left: 64, right: 32, top: 64, bottom: 52 },
    legend: { top: 0, left: 'center', textStyle: { color: TEXT }, data: ['Layouts', 'Pareto front', 'Selected'] },
    tooltip: {
      trigger: 'item',
      formatter: (p: { seriesName: string; value: number[] }) => {
        const r = ranked[p.value[2]];
        if (!r) return `${p.seriesName}: ${p.value[1].toFixed(0)} tok/s/GPU at ${p.value[0].toFixed(1)} tok/s/user`;
        return `#${num(r.rank)} ${servingLabel(r.config)}<br/>${p.value[1].toFixed(0)} tokens/s/GPU<br/>${p.value[0].toFixed(1)} tokens/s/user`;
      },
    },
    xAxis: {
      type: 'value',
      name: 'output tokens/s per user',
      nameLocation: 'middle',
      nameGap: 30,
      min: 0,
      max: Math.ceil(maxX * 1.1),
      axisLabel: { color: MUTED },
      nameTextStyle: { color: TEXT },
    },
    yAxis: { type: 'value', name: 'output tokens/s per GPU', min: 0, axisLabel: { color: MUTED }, nameTextStyle: { color: TEXT, align: 'left' } },
    series: [
      {
        name: 'Layouts',
        type: 'scatter',
        symbolSize: 11,
        data,
        markLine: lines.length
          ? {
              symbol: 'none',
              silent: true,
              lineStyle: { color: '#bc4c00', type: 'dashed', width: 2 },
              label: { color: '#953800', position: 'insideEndTop', formatter: (p: { data?: { name?: string } }) => p.data?.name ?? '' },
              data: lines.map((l) => ({ xAxis: l.x, name: l.label })),
            }
          : undefined,
      },
      {
        name: 'Pareto front',
        type: 'line',
        symbol: 'none',
        silent: true,
        lineStyle: { color: '#8250df', width: 2 },
        itemStyle: { color: '#8250df' },
        data: frontData,
      },
      {
        name: 'Selected',
        type: 'scatter',
        symbol: 'diamond',
        symbolSize: 20,
        itemStyle: { color: '#f5b800', borderColor: TEXT, borderWidth: 1.5 },
        data: sel ? [[num(sel.tokens_per_sec_per_user), num(sel.output_tokens_per_sec_per_gpu), selected]] : [],
        z: 5,
      },
    ],
  };
}

export const STEP_PARTS: [string, string, string][] = [
  ['compute_ms', 'compute', '#0969da'],
  ['memory_ms', 'memory reads', '#1a7f37'],
  ['tp_comm_ms', 'TP comm', '#8250df'],
  ['pp_comm_ms', 'PP comm', '#cf222e'],
  ['overhead_ms', 'overhead', '#57606a'],
  ['kv_transfer_ms', 'KV transfer', '#bc4c00'],
];

export const SERVING_MEMORY_PARTS: [string, string, string][] = [
  ['weights', 'weights', '#0969da'],
  ['kv_cache', 'KV cache', '#8250df'],
  ['activations', 'activations', '#bc4c00'],
  ['reserve', 'runtime reserve', '#57606a'],
];

/** Horizontal stacked bars, one bar per row (`values` by part key). */
export function barsOption(rows: { label: string; values: Record<string, number | undefined> }[], parts: [string, string, string][], unit: string, capacity: number): echarts.EChartsCoreOption {
  return {
    textStyle: FONT,
    animation: false,
    aria: { enabled: true },
    grid: { left: 8, right: 32, top: 72, bottom: 44, containLabel: true },
    legend: { top: 4, textStyle: { color: TEXT }, itemWidth: 14 },
    tooltip: { trigger: 'axis', axisPointer: { type: 'shadow' }, valueFormatter: (v: number) => `${Number(v).toFixed(3)} ${unit}` },
    xAxis: { type: 'value', name: unit, nameLocation: 'middle', nameGap: 26, axisLabel: { color: MUTED }, nameTextStyle: { color: TEXT }, max: capacity > 0 ? (v: { max: number }) => Math.ceil((Math.max(v.max, capacity) * 1.05) / 10) * 10 : undefined },
    yAxis: { type: 'category', data: rows.map((r) => r.label), inverse: true, axisLabel: { color: TEXT } },
    series: parts.map(([key, label, color], i) => ({
      name: label,
      type: 'bar',
      stack: 'total',
      barMaxWidth: 36,
      itemStyle: { color },
      data: rows.map((r) => num(r.values[key])),
      markLine:
        i === 0 && capacity > 0
          ? {
              symbol: 'none',
              silent: true,
              lineStyle: { color: '#cf222e', type: 'dashed', width: 2 },
              label: { formatter: `capacity ${capacity.toFixed(0)} GiB`, color: '#a40e26', position: 'start' },
              data: [{ xAxis: capacity }],
            }
          : undefined,
    })),
  };
}
