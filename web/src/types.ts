// The REST API's JSON (proto3 JSON mapping of proto/paratune/v1/*.proto): snake_case
// names, int64 as strings, enums as names, fields at their default value usually omitted.
// Everything is therefore optional here; read numbers through num() in format.ts.

/** int64 arrives as a JSON string; tolerate numbers too. */
export type Int64 = string | number;

export type JobStateName =
  | 'JOB_STATE_UNSPECIFIED'
  | 'JOB_STATE_PENDING'
  | 'JOB_STATE_PLANNING'
  | 'JOB_STATE_PROFILING'
  | 'JOB_STATE_COMPOSING'
  | 'JOB_STATE_VERIFYING'
  | 'JOB_STATE_SUCCEEDED'
  | 'JOB_STATE_FAILED'
  | 'JOB_STATE_CANCELLED';

export interface ModelSpec {
  preset?: string;
  hf_config_json?: string;
  name?: string;
  num_layers?: Int64;
  hidden_size?: Int64;
  num_attention_heads?: Int64;
  num_query_groups?: Int64;
  ffn_hidden_size?: Int64;
  vocab_size?: Int64;
  activation?: string;
  normalization?: string;
  tie_embeddings?: boolean;
  position_embedding?: string;
  max_position_embeddings?: Int64;
  num_experts?: Int64;
}

export interface TrainingSpec {
  seq_length?: Int64;
  global_batch_size?: Int64;
  precision?: string;
  flash_attention?: boolean;
  dropout?: boolean;
  optimizer?: string;
  total_tokens?: Int64;
  /** The codebase that runs the job ("megatron-core" when absent). */
  framework?: string;
}

export interface ClusterSpec {
  gpu?: string;
  num_gpus?: Int64;
  gpus_per_node?: Int64;
  nvlink_bandwidth_gbps?: number;
  network_bandwidth_gbps?: number;
  memory_gib?: number;
}

export interface SearchSpec {
  tp?: Int64[];
  pp?: Int64[];
  dp?: Int64[];
  cp?: Int64[];
  vp?: Int64[];
  micro_batch_size?: Int64[];
  sequence_parallel?: boolean[];
  recompute?: string[];
  recompute_num_layers?: Int64[];
  distributed_optimizer?: boolean[];
  data_parallel_sharding?: string[];
  shard_group_size?: Int64;
  top_k?: Int64;
  objective?: string;
  mode?: string;
  allow_tp_across_nodes?: boolean;
  verify_top_k?: Int64;
  /** Inference jobs: model instances, engine limits, precisions, disaggregation. */
  replicas?: Int64[];
  prefill_replicas?: Int64[];
  decode_replicas?: Int64[];
  /** Attention data parallelism to try (mixture-of-experts models, tp > 1, ep = tp). */
  attention_dp?: boolean[];
  max_batch_size?: Int64[];
  max_num_tokens?: Int64[];
  weight_precision?: string[];
  kv_cache_precision?: string[];
  disaggregated?: boolean[];
}

/** Percentile limits in milliseconds; absent = no limit. */
export interface LatencyLimits {
  p50?: number;
  p90?: number;
  p99?: number;
}

/** The workload and limits of an inference job (`serving:`). */
export interface ServingSpec {
  engine?: string;
  isl?: Int64;
  isl_stddev?: number;
  osl?: Int64;
  osl_stddev?: number;
  concurrency?: Int64;
  request_rate?: number;
  num_requests?: Int64;
  batching?: string;
  batch_size?: Int64;
  ttft_ms?: LatencyLimits;
  tpot_ms?: LatencyLimits;
  min_tokens_per_sec_per_user?: number;
  price_per_gpu_hour?: number;
  kv_cache_fraction?: number;
}

export interface JobSpec {
  name?: string;
  model?: ModelSpec;
  training?: TrainingSpec;
  cluster?: ClusterSpec;
  search?: SearchSpec;
  /** "training" (default) | "inference". */
  kind?: string;
  serving?: ServingSpec;
}

export interface JobProgress {
  tasks_total?: Int64;
  tasks_done?: Int64;
  tasks_failed?: Int64;
  tasks_cached?: Int64;
  eta_s?: number;
}

export interface Job {
  id?: string;
  name?: string;
  state?: JobStateName;
  spec?: JobSpec;
  progress?: JobProgress;
  error?: string;
  create_time?: string;
  update_time?: string;
}

export interface ListJobsResponse {
  jobs?: Job[];
  next_page_token?: string;
}

export interface ParallelConfig {
  tp?: Int64;
  pp?: Int64;
  dp?: Int64;
  cp?: Int64;
  vp?: Int64;
  micro_batch_size?: Int64;
  sequence_parallel?: boolean;
  recompute?: string;
  recompute_num_layers?: Int64;
  distributed_optimizer?: boolean;
  data_parallel_sharding?: string;
  shard_group_size?: Int64;
  ep?: Int64;
  etp?: Int64;
  moe_token_dispatcher?: string;
  tp_comm_overlap?: boolean;
  offload?: string;
  activation_offload?: boolean;
}

export interface TimeBreakdown {
  compute?: number;
  tp_comm?: number;
  cp_comm?: number;
  pp_bubble?: number;
  pp_p2p?: number;
  dp_comm?: number;
  optimizer?: number;
  ep_comm?: number;
  offload?: number;
}

export interface MemoryBreakdown {
  peak_gib?: number;
  weights?: number;
  gradients?: number;
  optimizer?: number;
  activations?: number;
  other?: number;
  capacity_gib?: number;
  /** Of `other`: the last stage's loss buffers (GiB), when the peak is the last stage's. */
  loss_buffers?: number;
  /** Host memory of this GPU's offloaded state, and what the host has per GPU (GiB). */
  host_gib?: number;
  host_capacity_gib?: number;
}

export interface Verification {
  measured_iteration_time_s?: number;
  predicted_iteration_time_s?: number;
  measured_peak_gib?: number;
  predicted_peak_gib?: number;
  /** predicted_peak_gib as the trainer's tracking allocator counts it (no framework workspace). */
  predicted_tracked_peak_gib?: number;
  status?: string;
  measured_peak_gib_per_rank?: number[];
  measured_losses?: number[];
  measured_step_seconds?: number[];
}

export interface RankedConfig {
  rank?: Int64;
  config?: ParallelConfig;
  iteration_time_s?: number;
  tokens_per_sec_per_gpu?: number;
  model_tflops_per_gpu?: number;
  hardware_tflops_per_gpu?: number;
  mfu?: number;
  memory?: MemoryBreakdown;
  fits?: boolean;
  source?: string;
  time?: TimeBreakdown;
  time_to_train_days?: number;
  verification?: Verification;
  notes?: string[];
}

export interface RejectedConfig {
  config?: ParallelConfig;
  reason?: string;
}

/** How many rejected layouts broke one rule (the reason with its numbers taken out). */
export interface RejectedReason {
  reason?: string;
  count?: Int64;
}

export interface PlanResult {
  ranked?: RankedConfig[];
  candidates_considered?: Int64;
  feasible?: Int64;
  elapsed_ms?: number;
  /** The first rejected layouts (the coordinator lists at most 200). */
  rejected?: RejectedConfig[];
  /** Every rejected layout, listed or not. */
  rejected_total?: Int64;
  /** Rejected layouts per rule, most frequent first. */
  rejected_reasons?: RejectedReason[];
  /** Whether the end-to-end runs confirm the ranking (set once a layout was verified). */
  verification_summary?: VerificationSummary;
  /** The result of an inference job (then `ranked` and `rejected` are empty). */
  inference?: InferencePlanResult;
}

/** One serving layout (inference.proto ServingConfig; counts are JSON numbers). */
export interface ServingConfig {
  tp?: number;
  pp?: number;
  ep?: number;
  /** Attention data parallelism: each tp rank runs attention on its own sequences. */
  attention_dp?: boolean;
  replicas?: number;
  max_batch_size?: number;
  max_num_tokens?: number;
  weight_precision?: string;
  kv_cache_precision?: string;
  disaggregated?: boolean;
  prefill_replicas?: number;
  decode_replicas?: number;
  /** GPUs the layout uses. */
  num_gpus?: number;
}

/** Mean and percentiles of a latency, milliseconds. */
export interface LatencyStats {
  mean?: number;
  p50?: number;
  p90?: number;
  p99?: number;
}

/** Memory per GPU of the most loaded rank, GiB. */
export interface ServingMemory {
  weights?: number;
  kv_cache?: number;
  activations?: number;
  reserve?: number;
  peak?: number;
  capacity?: number;
}

/** One engine step of a phase, milliseconds. */
export interface StepBreakdown {
  compute_ms?: number;
  memory_ms?: number;
  tp_comm_ms?: number;
  pp_comm_ms?: number;
  overhead_ms?: number;
  kv_transfer_ms?: number;
  total_ms?: number;
  source?: string;
}

export interface InferenceRankedConfig {
  rank?: number;
  config?: ServingConfig;
  output_tokens_per_sec_per_gpu?: number;
  output_tokens_per_sec?: number;
  tokens_per_sec_per_user?: number;
  requests_per_sec?: number;
  ttft_ms?: LatencyStats;
  tpot_ms?: LatencyStats;
  e2e_latency_ms?: LatencyStats;
  memory?: ServingMemory;
  max_concurrency?: number;
  cost_per_million_output_tokens?: number;
  meets_limits?: boolean;
  pareto_optimal?: boolean;
  prefill_step?: StepBreakdown;
  decode_step?: StepBreakdown;
  notes?: string[];
}

export interface InferenceRejectedConfig {
  config?: ServingConfig;
  rule?: string;
  reason?: string;
}

export interface InferencePlanResult {
  ranked?: InferenceRankedConfig[];
  /** tokens/s/GPU against tokens/s/user, by decreasing tokens/s/GPU. */
  pareto_front?: InferenceRankedConfig[];
  rejected?: InferenceRejectedConfig[];
  candidates_considered?: number;
  feasible?: number;
  rejected_total?: number;
  /** Rejected layouts per rule ("memory", "ttft", "tpot", "tokens_per_user", "layout"). */
  rejected_reasons?: Record<string, number>;
  recommendation?: string;
  elapsed_ms?: number;
}

/** The verified layouts compared with each other (results.proto VerificationSummary). */
export interface VerificationSummary {
  verified?: Int64;
  predicted_best_rank?: Int64;
  measured_best_rank?: Int64;
  regret_pct?: number;
  pairs_in_order?: Int64;
  pairs?: Int64;
  /** Every timed step of the measured best was faster than every one of the predicted best. */
  separated?: boolean;
  verdict?: string;
}

export interface JobResults {
  job_id?: string;
  state?: JobStateName;
  plan?: PlanResult;
}

export interface Device {
  index?: number;
  name?: string;
  memory_bytes?: Int64;
  nvlink_peers?: number[];
}

export interface WorkerInfo {
  id?: string;
  name?: string;
  backend?: string;
  device_kind?: string;
  devices?: Device[];
  cpu_cores?: number;
  memory_bytes?: Int64;
  state?: string;
  current_task_id?: string;
  last_heartbeat_unix_ms?: Int64;
}

export interface ListWorkersResponse {
  workers?: WorkerInfo[];
}

/** The REST error body: {"code", "status", "message"}. */
export interface ErrorBody {
  code?: number;
  status?: string;
  message?: string;
}

/** GET /v1/catalog: what a spec can name, resolved by the coordinator. */
export interface CatalogPreset {
  name: string;
  model?: ModelSpec;
}

export interface CatalogDevice {
  name: string;
  memory_bytes?: number;
  peak_bf16_tflops?: number;
  peak_fp8_tflops?: number;
  host_memory?: boolean;
  source?: string;
}

/** A training codebase (training.framework) and its default export format. */
export interface CatalogFramework {
  name: string;
  export_format?: string;
}

export interface Catalog {
  presets?: CatalogPreset[];
  devices?: CatalogDevice[];
  precisions?: string[];
  frameworks?: CatalogFramework[];
}

/** GET /v1/jobs/{id}/results/{rank}:export?format=... */
export type ExportFormat =
    'megatron'|'nemo'|'deepspeed'|'torchtitan'|'automodel'|'json'|'trtllm'|'vllm'|'sglang';
