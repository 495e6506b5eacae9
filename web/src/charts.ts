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
import { layoutLabel, num } from './format';
import type { RankedConfig } from './types';

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
  ['pp_bubble', 'PP bubble', '#cf222e'],
  ['pp_p2p', 'PP p2p', '#bc4c00'],
  ['dp_comm', 'DP comm', '#1a7f37'],
  ['optimizer', 'optimizer', '#57606a'],
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
