// Derived views of a plan: the throughput/memory Pareto frontier and sorting.
import { num } from './format';
import type { RankedConfig } from './types';

export interface Point {
  index: number;
  memory: number;
  throughput: number;
}

/**
 * Layouts not dominated by another (less or equal memory and more or equal throughput,
 * one strictly better), ordered by memory ascending.
 */
export function paretoFrontier(points: Point[]): Point[] {
  const sorted = [...points].sort((a, b) => a.memory - b.memory || b.throughput - a.throughput);
  const frontier: Point[] = [];
  let best = -Infinity;
  for (const p of sorted) {
    if (p.throughput > best) {
      frontier.push(p);
      best = p.throughput;
    }
  }
  return frontier;
}

export function pointsOf(ranked: RankedConfig[]): Point[] {
  return ranked.map((r, index) => ({
    index,
    memory: num(r.memory?.peak_gib),
    throughput: num(r.tokens_per_sec_per_gpu),
  }));
}
