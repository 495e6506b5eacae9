#include "search/framework_profile.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "search/specs.h"

namespace paratune {
namespace {

using DPS = DataParallelSharding;

std::vector<FrameworkProfile> BuildProfiles() {
  std::vector<FrameworkProfile> out;

  // Megatron-LM / Megatron-Core (megatron/training/arguments.py): --tp-comm-overlap is
  // opt-in; --overlap-grad-reduce is what ParaTune's Megatron export passes;
  // --overlap-p2p-communication is on unless --no-overlap-p2p-communication;
  // --overlap-param-gather (with the distributed optimizer and --overlap-grad-reduce) is
  // what the time model assumes and the export passes. With BF16 the
  // gradients accumulate and all-reduce in FP32 (accumulate_allreduce_grads_in_fp32 is
  // forced on: main_grad buffers of 4 bytes). Sharding: --use-distributed-optimizer and
  // Megatron-FSDP's --data-parallel-sharding-strategy optim_grads / optim_grads_params.
  // The cross entropy is vocab-parallel (core/tensor_parallel/cross_entropy.py) on FP32
  // logits beside the 16-bit output.
  FrameworkProfile megatron;
  megatron.framework = Framework::kMegatronCore;
  megatron.tp_comm_overlap = {true, false};
  megatron.overlap_grad_reduce = {true, true};
  megatron.overlap_grad_reduce_on_with_full_sharding = true;
  megatron.overlap_p2p_comm = {true, true};
  megatron.overlap_param_gather = {true, true};
  megatron.sharding = {DPS::kNone, DPS::kOptimizer, DPS::kOptimizerGrads, DPS::kFull};
  megatron.open_sharding = {DPS::kOptimizer};
  // Megatron-Core's TEDotProductAttention lets Transformer Engine pick the backend, and TE
  // prefers its FusedAttention (cuDNN's flash attention, F16_arbitrary_seqlen) over
  // FlashAttention on compute capability 9.0 and later "for performance reasons"
  // (transformer_engine/pytorch/attention/dot_product_attention/utils.py,
  // get_attention_backend); NeMo and Megatron-Bridge run the same module.
  megatron.hopper_attention_kernel = AttentionKernel::kCudnn;
  // TELinear.forward passes is_first_microbatch (set by the schedule at every step's first
  // micro-batch; disable_parameter_transpose_cache off by default): Transformer Engine casts
  // the weight once per step and keeps the FP8 copy as a workspace.
  megatron.fp8_weight_cache = true;
  megatron.megatron_numerics = true;
  megatron.export_format = "megatron";
  out.push_back(megatron);

  // NeMo 2.0 / Megatron-Bridge run Megatron-Core's model and DDP (the same facts); their
  // recipes turn on overlap_grad_reduce, overlap_param_gather and grad_reduce_in_fp32
  // (nemo/collections/llm/recipes, DistributedDataParallelConfig), TP overlap only through
  // the MegatronCommOverlapCallback of the performance recipes.
  FrameworkProfile nemo = megatron;
  nemo.framework = Framework::kNemo;
  nemo.export_format = "nemo";
  // nemo/collections/llm/recipes/precision/mixed_precision.py bf16_with_fp8_mixed:
  // fp8_param_gather = True.
  nemo.fp8_param_gather_by_default = true;
  out.push_back(nemo);

  // microsoft/Megatron-DeepSpeed: Megatron's model code (vocab-parallel loss, Megatron's
  // sequence parallelism) on DeepSpeed's engine. Its pipeline is DeepSpeed's PipelineEngine
  // (deepspeed/runtime/pipe: a non-interleaved 1F1B TrainSchedule with blocking sends, and
  // ZeRO stage 0 or 1 only: "ZeRO-2 and ZeRO-3 are incompatible with pipeline
  // parallelism"); no Transformer Engine TP overlap and no ring context parallelism.
  // Gradient reduction is ZeRO's overlap_comm (DeepSpeedZeroConfig: off unless stage 3);
  // ZeRO-1/2 all-gather the updated partitions after the step, before the next forward
  // (runtime/zero/stage_1_and_2.py step: all_gather_dp_groups), with no overlap;
  // in the engine's communication_data_type (the 16-bit dtype with bf16/fp16 enabled);
  // BF16 runs use BF16_Optimizer, which accumulates gradients in FP32 buffers
  // (deepspeed/runtime/bf16_optimizer.py fp32_groups_gradients: 4 bytes per parameter).
  // The PipelineEngine keeps each micro-batch's stage output in pipe_buffers['outputs']
  // until its backward runs torch.autograd.backward on it (runtime/pipe/engine.py
  // _exec_backward_pass); Megatron's schedules pseudo-free it once sent
  // (deallocate_output_tensor). PipelineModule partitions the transformer layers alone
  // (Megatron-DeepSpeed's GPTModelPipe: partition_method "type:transformer") with
  // runtime/utils.py partition_balanced: stages of ceil(L/p) and floor(L/p) layers where p
  // does not divide L, the heaviest first (modelled as the first L mod p stages one more,
  // partition_uniform's order: the same bottleneck and first stage).
  FrameworkProfile megatron_deepspeed;
  megatron_deepspeed.framework = Framework::kMegatronDeepspeed;
  megatron_deepspeed.tp_comm_overlap = {false, false};
  megatron_deepspeed.overlap_grad_reduce = {true, false};
  megatron_deepspeed.overlap_grad_reduce_on_with_full_sharding = true;
  megatron_deepspeed.overlap_p2p_comm = {false, false};
  megatron_deepspeed.overlap_param_gather = {false, false};
  megatron_deepspeed.sharding = {DPS::kNone, DPS::kOptimizer, DPS::kOptimizerGrads, DPS::kFull};
  megatron_deepspeed.open_sharding = {DPS::kOptimizer};
  megatron_deepspeed.interleaved_pipeline = false;
  megatron_deepspeed.context_parallel = false;
  megatron_deepspeed.grad_sharding_with_pipeline = false;
  megatron_deepspeed.activation_offload = false;
  megatron_deepspeed.hopper_attention_kernel = AttentionKernel::kFlash2;  // the flash-attn package
  megatron_deepspeed.reduce_gradients_in_fp32 = false;
  megatron_deepspeed.pipeline_keeps_outputs = true;
  // The PipelineEngine sends pipe_buffers['outputs'] whole (_exec_send_activations:
  // p2p.send of the stage output) from every rank of the stage's TP group.
  megatron_deepspeed.pipeline_sends_replicated_activation = true;
  // After every micro-batch's backward the engine calls BF16_Optimizer.update_hp_grads
  // (runtime/pipe/engine.py _exec_backward_pass; BF16_Optimizer.backward without a
  // pipeline): hp_grad.add_(lp.grad.to(float32)) per parameter, a FP32 copy of the BF16
  // gradient (read 2, write 4) added to the FP32 accumulator (read 4 + 4, write 4): 18
  // bytes. FP16 runs accumulate in the parameters' FP16 .grad as autograd does (read the
  // held and the new gradient, write the sum: 6 bytes).
  megatron_deepspeed.grad_accumulation_bytes_bf16 = 18;
  megatron_deepspeed.grad_accumulation_bytes_fp16 = 6;
  megatron_deepspeed.pipeline_split = PipelineSplit::kLayersUneven;
  megatron_deepspeed.export_format = "deepspeed";
  out.push_back(megatron_deepspeed);

  // DeepSpeed ZeRO on a PyTorch model (deepspeed.ai/docs/config-json): stages 0-3,
  // overlap_comm off unless stage 3, AutoTP for tensor parallelism (no sequence
  // parallelism of the norms, no TP overlap), the PipelineEngine as above, no ring context
  // parallelism. ZeRO's optimizer (runtime/zero/stage_1_and_2.py, stage3.py) keeps the
  // gradients in the 16-bit model dtype and reduces them in it; the FP32 master partition
  // is optimizer state (12 bytes). The model's loss runs over the full vocabulary on
  // every rank (FP32 logits beside the 16-bit output, as Hugging Face models upcast them).
  FrameworkProfile deepspeed = megatron_deepspeed;
  deepspeed.framework = Framework::kDeepspeed;
  deepspeed.sequence_parallel = false;
  deepspeed.gradient_bytes_per_param = 2;
  deepspeed.vocab_parallel_loss = false;
  // ZeRO's optimizer takes the gradients in its own backward hooks (not modelled).
  deepspeed.grad_accumulation_bytes_bf16 = 0;
  deepspeed.grad_accumulation_bytes_fp16 = 0;
  out.push_back(deepspeed);

  // torchtitan (torchtitan/config/job_config.py, docs/fsdp.md): FSDP2 fully_shard with
  // fsdp_reshard_after_forward "default" (full) or "never" (parameters stay gathered from
  // forward to backward: optimizer_grads), replicate (DDP) for none; no ZeRO-1 form.
  // mixed_precision_param bfloat16 over FP32 parameters (the optimizer updates them
  // in place: Adam's m and v only), mixed_precision_reduce float32; FP32 sharded gradients.
  // With "never" the parameters are gathered again layer by layer in the next forward,
  // prefetched (the sharded optimizer's gather overlapped).
  // Async TP (experimental.enable_async_tensor_parallel, off by default); TP's plan shards
  // the norms by sequence; loss_parallel (vocab-parallel loss) unless disabled; pipeline
  // schedules with interleaving (torch.distributed.pipelining) and context parallelism.
  // Its stage split (torchtitan/distributed/pipeline_parallel.py,
  // generate_llm_fqn_per_model_part) spreads num_layers + first_stage_less_layers +
  // last_stage_less_layers (1 and 1 by default) over the p*v virtual stages, one more to
  // each of the first (total mod p*v) stages: uneven where p*v does not divide.
  FrameworkProfile torchtitan;
  torchtitan.framework = Framework::kTorchtitan;
  torchtitan.tp_comm_overlap = {true, false};
  torchtitan.overlap_grad_reduce = {true, true};
  torchtitan.overlap_grad_reduce_on_with_full_sharding = true;
  torchtitan.overlap_p2p_comm = {true, true};
  torchtitan.overlap_param_gather = {true, true};
  // Under its pipeline FSDP2 keeps the gathered parameters (fsdp_reshard_after_forward
  // "default" does not reshard with PP) and torch.distributed.pipelining defers the
  // gradient sync to a stage's last backward: the optimizer stage, pp > 1 only.
  torchtitan.sharding = {DPS::kNone, DPS::kOptimizer, DPS::kOptimizerGrads, DPS::kFull};
  torchtitan.open_sharding = {DPS::kOptimizer, DPS::kFull};
  torchtitan.pipeline_defers_fsdp_sync = true;
  torchtitan.fp32_parameters = true;
  torchtitan.activation_offload = false;
  torchtitan.pipeline_split = PipelineSplit::kSlotsUneven;
  // Its experts exchange tokens by all-to-all (torchtitan/distributed/expert_parallel.py)
  // or with the DeepEP / HybridEP backends (expert_parallel_comm_backend): no all-gather
  // dispatcher.
  torchtitan.dispatchers = {MoeTokenDispatcher::kAllToAll, MoeTokenDispatcher::kFlex};
  torchtitan.export_format = "torchtitan";
  out.push_back(torchtitan);

  // llm-foundry on Composer (composer/utils/parallelism.py FSDPConfig, llm-foundry's yamls
  // and scripts/train/benchmarking): PyTorch FSDP (FSDP1) with sharding_strategy
  // FULL_SHARD (the yamls' default), SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD (a shard
  // group); no pipeline, context or Megatron sequence parallelism. FSDP reduce-scatters each
  // layer's gradients in the backward (always overlapped); after the step SHARD_GRAD_OP
  // gathers each unit again in the next forward, behind the previous unit's compute
  // (FSDP's CPU run-ahead issues it early). Composer's mixed_precision
  // DEFAULT (FSDPConfig's default, the mode the benchmark tables state) computes in BF16
  // (param_dtype) and reduces in FP32 (reduce_dtype) over FP32 flat parameters that the
  // optimizer updates in place; the sharded gradients are FP32. The loss (torch
  // CrossEntropyLoss) runs over the full vocabulary.
  FrameworkProfile llm_foundry;
  llm_foundry.framework = Framework::kLlmFoundry;
  llm_foundry.tp_comm_overlap = {false, false};
  llm_foundry.overlap_grad_reduce = {true, true};
  llm_foundry.overlap_grad_reduce_on_with_full_sharding = true;
  llm_foundry.overlap_p2p_comm = {false, false};
  llm_foundry.overlap_param_gather = {true, true};
  llm_foundry.sharding = {DPS::kNone, DPS::kOptimizerGrads, DPS::kFull};
  llm_foundry.open_sharding = {DPS::kFull};
  llm_foundry.pipeline_parallel = false;
  llm_foundry.activation_offload = false;
  llm_foundry.interleaved_pipeline = false;
  llm_foundry.context_parallel = false;
  llm_foundry.sequence_parallel = false;
  llm_foundry.fp32_parameters = true;
  llm_foundry.vocab_parallel_loss = false;
  out.push_back(llm_foundry);

  // NeMo AutoModel (nemo_automodel/_transformers/auto_model.py, components/moe/
  // parallelizer.py, components/distributed/pipelining/functional.py): PyTorch FSDP2
  // (distributed.strategy fsdp2; ddp for none) with expert parallelism folded out of the
  // FSDP ranks, TP, CP and torch.distributed.pipelining schedules. Its models are built in
  // BF16 ("If "auto", defaults to torch.bfloat16") and FSDP2's MixedPrecisionPolicy
  // (param_dtype bfloat16, reduce_dtype float32) reduces in FP32 into BF16 sharded
  // gradients; torch.optim.Adam keeps m and v in the parameters' dtype: no FP32 copy.
  // Experts already sharded by EP and PP are left out of FSDP. The pipeline split
  // (generate_hf_model_fqn_per_model_part) spreads the layers alone over the p*v stages,
  // the first (L mod p*v) one layer more, the embedding and the head added to the first
  // and last. Its own MoE and dense models run Transformer Engine's attention (the
  // benchmark configs' backend attn: te), cuDNN's fused attention on Hopper. The loss
  // (MaskedCrossEntropy) runs over the full vocabulary.
  // Sharding (components/distributed/config.py): FSDP2Config's reshard_after_forward
  // (None: pipelined layers keep their gathered parameters, the others reshard) and
  // MoEParallelizerConfig's (False), with defer_fsdp_grad_sync (True: the gradients
  // accumulate unsharded and reduce-scatter in the last micro-batch's backward). Kept
  // gathered and synced once, FSDP2 holds what the distributed optimizer holds (the 16-bit
  // parameters and gradients whole, the state sharded, the parameters gathered behind the
  // first forward): optimizer. Resharding and syncing every micro-batch: full. DDP: none.
  // Async TP exists (enable_async_tensor_parallel, off by default).
  FrameworkProfile automodel;
  automodel.framework = Framework::kNemoAutomodel;
  automodel.tp_comm_overlap = {true, false};
  automodel.overlap_grad_reduce = {true, true};
  automodel.overlap_grad_reduce_on_with_full_sharding = true;
  automodel.overlap_p2p_comm = {true, true};
  automodel.overlap_param_gather = {true, true};
  automodel.sharding = {DPS::kNone, DPS::kOptimizer, DPS::kFull};
  automodel.open_sharding = {DPS::kOptimizer, DPS::kFull};
  automodel.gradient_bytes_per_param = 2;
  automodel.optimizer_in_training_dtype = true;
  automodel.activation_offload = false;
  automodel.pipeline_split = PipelineSplit::kLayersUneven;
  automodel.vocab_parallel_loss = false;
  automodel.hopper_attention_kernel = AttentionKernel::kCudnn;
  // Experts: sharded over EP alone (no expert tensor parallelism); GroupedExperts
  // (backend dispatcher "torch") all-gathers the tokens over the EP group and
  // reduce-scatters the outputs (components/moe/experts.py), GroupedExpertsDeepEP
  // ("deepep") is the fused DeepEP dispatch: allgather and flex, no all-to-all.
  automodel.expert_tensor_parallel = false;
  automodel.dispatchers = {MoeTokenDispatcher::kAllGather, MoeTokenDispatcher::kFlex};
  automodel.pipeline_defers_fsdp_sync = true;
  automodel.fsdp_defers_sync_without_pipeline = true;
  automodel.export_format = "automodel";
  out.push_back(automodel);
  return out;
}

// "none, optimizer_grads, full": the names of enum values, for the refusals' texts.
template <typename E>
std::string Names(const std::vector<E>& values) {
  std::vector<std::string> names;
  for (E v : values) names.push_back(ToString(v));
  return absl::StrJoin(names, ", ");
}

// A dispatcher the codebase does not run, for a layout and for a search list alike.
absl::Status UnknownDispatcher(const FrameworkProfile& p, const char* name, MoeTokenDispatcher d) {
  return absl::InvalidArgumentError(absl::StrCat("search.moe_token_dispatcher ", ToString(d),
                                                 " is not a dispatcher of training.framework ",
                                                 name, " (it runs ", Names(p.dispatchers), ")"));
}

bool Has(const std::vector<DataParallelSharding>& stages, DataParallelSharding s) {
  return std::find(stages.begin(), stages.end(), s) != stages.end();
}

// The frameworks that have an overlap, for the refusal's text.
std::string FrameworksWith(OverlapFact FrameworkProfile::*overlap) {
  std::vector<std::string> names;
  for (Framework f : AllFrameworks()) {
    if ((ProfileOf(f).*overlap).exists) names.push_back(ToString(f));
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace

bool FrameworkProfile::HasDispatcher(MoeTokenDispatcher d) const {
  return std::find(dispatchers.begin(), dispatchers.end(), d) != dispatchers.end();
}

bool FrameworkProfile::KeepsFsdpSharding(DataParallelSharding s, int64_t pp) const {
  if (!pipeline_defers_fsdp_sync) return true;
  if (pp > 1) return s == DataParallelSharding::kNone || s == DataParallelSharding::kOptimizer;
  return s != DataParallelSharding::kOptimizer || fsdp_defers_sync_without_pipeline;
}

const FrameworkProfile& ProfileOf(Framework framework) {
  static const std::vector<FrameworkProfile>* const kProfiles =
      new std::vector<FrameworkProfile>(BuildProfiles());
  for (const FrameworkProfile& p : *kProfiles) {
    if (p.framework == framework) return p;
  }
  return kProfiles->front();
}

double GradAccumulationBytesPerParam(Framework framework, Precision precision) {
  const FrameworkProfile& p = ProfileOf(framework);
  switch (precision) {
    case Precision::kFp32:
      return 0;
    case Precision::kFp16:
      return p.grad_accumulation_bytes_fp16;
    default:
      return p.grad_accumulation_bytes_bf16;
  }
}

AttentionKernel DefaultAttentionKernel(Framework framework, const DeviceProfile& device) {
  return device.HopperOrLater() ? ProfileOf(framework).hopper_attention_kernel
                                : AttentionKernel::kFlash2;
}

bool DefaultOverlapGradReduce(Framework framework, DataParallelSharding sharding, int64_t pp) {
  const FrameworkProfile& p = ProfileOf(framework);
  if (!p.overlap_grad_reduce.exists) return false;
  if (pp > 1 && p.pipeline_defers_fsdp_sync && sharding != DataParallelSharding::kNone) {
    return false;
  }
  if (sharding == DataParallelSharding::kFull && p.overlap_grad_reduce_on_with_full_sharding) {
    return true;
  }
  return p.overlap_grad_reduce.default_on;
}

bool DefaultOverlapParamGather(Framework framework, DataParallelSharding sharding) {
  if (sharding != DataParallelSharding::kOptimizer &&
      sharding != DataParallelSharding::kOptimizerGrads) {
    return true;
  }
  const FrameworkProfile& p = ProfileOf(framework);
  return p.overlap_param_gather.exists && p.overlap_param_gather.default_on;
}

double GradientReduceBytes(Framework framework, Precision precision) {
  if (precision == Precision::kFp32) return 4.0;
  if (precision == Precision::kFp16) return 2.0;
  return ProfileOf(framework).reduce_gradients_in_fp32 ? 4.0 : 2.0;
}

absl::Status CheckLayoutForFramework(const ParallelConfig& c, Framework framework) {
  const FrameworkProfile& p = ProfileOf(framework);
  const char* const name = ToString(framework);  // for the messages; no allocation per layout
  if (c.pp > 1 && !p.pipeline_parallel) {
    return absl::InvalidArgumentError(absl::StrCat("search.pp (", c.pp,
                                                   ") must be 1: training.framework ", name,
                                                   " has no pipeline parallelism"));
  }
  if (c.vp > 1 && !p.interleaved_pipeline) {
    return absl::InvalidArgumentError(absl::StrCat("search.vp (", c.vp,
                                                   ") must be 1: training.framework ", name,
                                                   " has no interleaved pipeline schedule"));
  }
  if (c.cp > 1 && !p.context_parallel) {
    return absl::InvalidArgumentError(absl::StrCat("search.cp (", c.cp,
                                                   ") must be 1: training.framework ", name,
                                                   " has no ring context parallelism"));
  }
  if (c.etp > 1 && !p.expert_tensor_parallel) {
    return absl::InvalidArgumentError(absl::StrCat("search.etp (", c.etp,
                                                   ") must be 1: training.framework ", name,
                                                   " has no expert tensor parallelism"));
  }
  if (c.ep * c.etp > 1 && !p.HasDispatcher(c.moe_token_dispatcher)) {
    return UnknownDispatcher(p, name, c.moe_token_dispatcher);
  }
  if (c.sequence_parallel && c.tp > 1 && !p.sequence_parallel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "search.sequence_parallel (true) needs a training.framework with Megatron's sequence "
        "parallelism (",
        name, " has none)"));
  }
  if (!Has(p.sharding, c.data_parallel_sharding)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "search.data_parallel_sharding ", ToString(c.data_parallel_sharding),
        " is not a stage of training.framework ", name, " (it runs ", Names(p.sharding), ")"));
  }
  if (c.pp > 1 && !p.grad_sharding_with_pipeline &&
      (c.data_parallel_sharding == DataParallelSharding::kOptimizerGrads ||
       c.data_parallel_sharding == DataParallelSharding::kFull)) {
    return absl::InvalidArgumentError(
        absl::StrCat("search.data_parallel_sharding ", ToString(c.data_parallel_sharding),
                     " with search.pp (", c.pp, ") > 1: training.framework ", name,
                     " pipelines with DeepSpeed's engine, which takes ZeRO stage 0 or 1 only"));
  }
  if (c.dp * c.cp > 1 && !p.KeepsFsdpSharding(c.data_parallel_sharding, c.pp)) {
    if (c.pp > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "search.data_parallel_sharding ", ToString(c.data_parallel_sharding), " with search.pp (",
          c.pp, ") > 1: training.framework ", name,
          "'s pipeline keeps FSDP2's gathered parameters and reduces the gradients after a "
          "stage's last backward (optimizer describes it)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "search.data_parallel_sharding optimizer with search.pp 1: training.framework ", name,
        " keeps FSDP2's gathered parameters and defers the gradient sync only under its "
        "pipeline (use optimizer_grads or full)"));
  }
  if (c.pp > 1 && p.pipeline_defers_fsdp_sync && c.dp * c.cp > 1 &&
      c.data_parallel_sharding == DataParallelSharding::kOptimizer && c.overlap_grad_reduce) {
    return absl::InvalidArgumentError(absl::StrCat(
        "search.overlap_grad_reduce (true) with search.pp (", c.pp, ") > 1: training.framework ",
        name, "'s pipeline reduce-scatters a stage's gradients after its last backward"));
  }
  if (c.overlap_param_gather && !p.overlap_param_gather.exists && c.dp * c.cp > 1 &&
      (c.data_parallel_sharding == DataParallelSharding::kOptimizer ||
       c.data_parallel_sharding == DataParallelSharding::kOptimizerGrads)) {
    return absl::InvalidArgumentError(
        absl::StrCat("search.overlap_param_gather (true) needs training.framework ",
                     FrameworksWith(&FrameworkProfile::overlap_param_gather), " (", name,
                     " all-gathers the sharded optimizer's parameters after the step)"));
  }
  if (c.activation_offload && !p.activation_offload) {
    return absl::InvalidArgumentError(absl::StrCat(
        "search.activation_offload (true) needs training.framework megatron-core or nemo (",
        name, " has no fine-grained activation offload)"));
  }
  if (c.tp_comm_overlap && !p.tp_comm_overlap.exists) {
    return absl::InvalidArgumentError(
        absl::StrCat("search.tp_comm_overlap (true) needs training.framework ",
                     FrameworksWith(&FrameworkProfile::tp_comm_overlap), " (", name,
                     " has no TP communication overlap)"));
  }
  return absl::OkStatus();
}

absl::Status CheckSearchForFramework(const SearchOptions& o, Framework framework) {
  const FrameworkProfile& p = ProfileOf(framework);
  const char* const name = ToString(framework);  // for the messages; no allocation per layout
  const auto asks_true = [](const std::vector<bool>& values) {
    return std::find(values.begin(), values.end(), true) != values.end();
  };
  const std::tuple<const char*, const std::vector<bool>*, OverlapFact FrameworkProfile::*,
                   const char*>
      overlaps[] = {
          {"search.tp_comm_overlap", &o.tp_comm_overlap, &FrameworkProfile::tp_comm_overlap,
           "TP communication overlap"},
          {"search.overlap_grad_reduce", &o.overlap_grad_reduce,
           &FrameworkProfile::overlap_grad_reduce, "gradient-reduce overlap"},
          {"search.overlap_p2p_comm", &o.overlap_p2p_comm, &FrameworkProfile::overlap_p2p_comm,
           "pipeline send/receive overlap"},
          {"search.overlap_param_gather", &o.overlap_param_gather,
           &FrameworkProfile::overlap_param_gather, "parameter all-gather overlap"},
      };
  for (const auto& [field, values, overlap, what] : overlaps) {
    if (asks_true(*values) && !(p.*overlap).exists) {
      return absl::InvalidArgumentError(absl::StrCat(field, " [true] needs training.framework ",
                                                     FrameworksWith(overlap), " (", name,
                                                     " has no ", what, ")"));
    }
  }
  if (asks_true(o.activation_offload) && !p.activation_offload) {
    return absl::InvalidArgumentError(absl::StrCat(
        "search.activation_offload [true] needs training.framework megatron-core or nemo (",
        name, " has no fine-grained activation offload)"));
  }
  if (!p.expert_tensor_parallel) {
    for (int64_t etp : o.etp) {
      if (etp > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("search.etp [", etp, "]: training.framework ", name,
                         " has no expert tensor parallelism (etp 1 only)"));
      }
    }
  }
  for (MoeTokenDispatcher d : o.moe_token_dispatcher) {
    if (!p.HasDispatcher(d)) {
      return UnknownDispatcher(p, name, d);
    }
  }
  for (DataParallelSharding s : o.data_parallel_sharding) {
    if (!Has(p.sharding, s)) {
      return absl::InvalidArgumentError(absl::StrCat("search.data_parallel_sharding ", ToString(s),
                                                     " is not a stage of training.framework ", name,
                                                     " (it runs ", Names(p.sharding), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace paratune
