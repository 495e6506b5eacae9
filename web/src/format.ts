// Number and label formatting shared by the pages.
import type { Int64, JobStateName, ParallelConfig, ServingConfig } from './types';

/** A proto JSON number (int64 strings included); `fallback` when absent or not a number. */
export function num(v: Int64 | number | undefined | null, fallback = 0): number {
  if (v === undefined || v === null || v === '') return fallback;
  const n = typeof v === 'number' ? v : Number(v);
  return Number.isFinite(n) ? n : fallback;
}

export function fixed(v: number, digits: number): string {
  return Number.isFinite(v) ? v.toFixed(digits) : '–';
}

/** Small values keep two significant digits (a CPU's 0.0042 TFLOP/s is not 0.0). */
export function adaptive(v: number, digits: number): string {
  if (!Number.isFinite(v)) return '–';
  if (v !== 0 && Math.abs(v) < 1) return v.toPrecision(2);
  return v.toFixed(digits);
}

export function thousands(v: number, digits = 0): string {
  return Number.isFinite(v)
    ? v.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
    : '–';
}

export function seconds(v: number): string {
  if (!Number.isFinite(v)) return '–';
  if (v === 0) return '0 s';
  if (Math.abs(v) < 1e-3) return `${(v * 1e6).toFixed(1)} µs`;
  if (Math.abs(v) < 1) return `${(v * 1e3).toFixed(1)} ms`;
  return `${v.toFixed(2)} s`;
}

export function bytes(v: number): string {
  if (!Number.isFinite(v) || v <= 0) return '–';
  const gib = v / 2 ** 30;
  if (gib >= 1) return `${gib.toFixed(1)} GiB`;
  return `${(v / 2 ** 20).toFixed(0)} MiB`;
}

const STATE_LABELS: Record<JobStateName, string> = {
  JOB_STATE_UNSPECIFIED: 'unknown',
  JOB_STATE_PENDING: 'pending',
  JOB_STATE_PLANNING: 'planning',
  JOB_STATE_PROFILING: 'profiling',
  JOB_STATE_COMPOSING: 'composing',
  JOB_STATE_VERIFYING: 'verifying',
  JOB_STATE_SUCCEEDED: 'succeeded',
  JOB_STATE_FAILED: 'failed',
  JOB_STATE_CANCELLED: 'cancelled',
};

export function stateLabel(state: JobStateName | undefined): string {
  return STATE_LABELS[state ?? 'JOB_STATE_UNSPECIFIED'] ?? String(state);
}

export function isTerminal(state: JobStateName | undefined): boolean {
  return (
    state === 'JOB_STATE_SUCCEEDED' ||
    state === 'JOB_STATE_FAILED' ||
    state === 'JOB_STATE_CANCELLED'
  );
}

/** "TP8 PP16 VP2 DP8 CP1 mb1 SP sel DO" style one-line description of a layout. */
export function layoutLabel(c: ParallelConfig | undefined): string {
  const cfg = c ?? {};
  const parts = [
    `TP${num(cfg.tp, 1)}`,
    `PP${num(cfg.pp, 1)}`,
  ];
  if (num(cfg.vp, 1) > 1) parts.push(`VP${num(cfg.vp, 1)}`);
  parts.push(`DP${num(cfg.dp, 1)}`);
  if (num(cfg.cp, 1) > 1) parts.push(`CP${num(cfg.cp, 1)}`);
  // Expert layers (mixture of experts): EP, expert TP and the token dispatcher.
  if (num(cfg.ep, 1) > 1 || num(cfg.etp, 1) > 1) {
    parts.push(`EP${num(cfg.ep, 1)}`);
    if (num(cfg.etp, 1) > 1) parts.push(`ETP${num(cfg.etp, 1)}`);
    if (cfg.moe_token_dispatcher && cfg.moe_token_dispatcher !== 'alltoall') {
      parts.push(cfg.moe_token_dispatcher);
    }
  }
  parts.push(`mb${num(cfg.micro_batch_size, 1)}`);
  if (cfg.sequence_parallel) parts.push('SP');
  const rc = cfg.recompute || 'none';
  if (rc !== 'none') {
    parts.push(rc === 'full' ? `full-rc${num(cfg.recompute_num_layers) ? `×${num(cfg.recompute_num_layers)}` : ''}` : `${rc}-rc`);
  }
  // A layout stored before data_parallel_sharding existed carries distributed_optimizer only.
  const sharding = cfg.data_parallel_sharding || (cfg.distributed_optimizer ? 'optimizer' : 'none');
  const label: Record<string, string> = { optimizer: 'dist-opt', optimizer_grads: 'ZeRO-2', full: 'FSDP' };
  if (label[sharding]) {
    const group = num(cfg.shard_group_size);
    parts.push(group > 0 ? `${label[sharding]}/${group}` : label[sharding]);
  }
  // Host offload of the optimizer state (and of the parameter shards).
  if (cfg.offload === 'optimizer') parts.push('offload');
  if (cfg.offload === 'optimizer_and_params') parts.push('offload+params');
  // Fine-grained activation offload of the job's training.offload_modules.
  if (cfg.activation_offload) parts.push('act-offload');
  if (cfg.tp_comm_overlap) parts.push('TP-overlap');
  return parts.join(' ');
}

export function timeAgo(ms: number, now = Date.now()): string {
  if (!ms) return '–';
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (ch) =>
    ch === '&' ? '&amp;' : ch === '<' ? '&lt;' : ch === '>' ? '&gt;' : ch === '"' ? '&quot;' : '&#39;',
  );
}

/** A serving layout in one line, e.g. "TP2 PP1 ×4 · batch 256 · 8192 tok · w fp8 / kv fp8". */
export function servingLabel(c: ServingConfig | undefined): string {
  const cfg = c ?? {};
  const parts = [`TP${num(cfg.tp, 1)}`, `PP${num(cfg.pp, 1)}`];
  if (num(cfg.ep, 1) > 1) parts.push(`EP${num(cfg.ep, 1)}`);
  if (cfg.attention_dp) parts.push('DP-attention');
  parts.push(cfg.disaggregated ? `${num(cfg.prefill_replicas)}P:${num(cfg.decode_replicas)}D` : `×${num(cfg.replicas, 1)}`);
  return `${parts.join(' ')} · batch ${num(cfg.max_batch_size)} · ${num(cfg.max_num_tokens)} tok · w ${cfg.weight_precision || 'bf16'} / kv ${cfg.kv_cache_precision || 'bf16'}`;
}
