#include "core/enums.h"

#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace paratune {
namespace {

/// Looks `s` up among the names of the values in `all`; the error lists the allowed names.
template <typename E, size_t N>
absl::StatusOr<E> ParseEnum(const char* what, absl::string_view s, const E (&all)[N]) {
  std::vector<std::string> names;
  for (E v : all) {
    if (s == ToString(v)) return v;
    names.push_back(ToString(v));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown ", what, " '", s, "' (expected ",
                                                 absl::StrJoin(names, ", "), ")"));
}

}  // namespace

bool IsGated(Activation a) { return a == Activation::kSwiglu || a == Activation::kGeglu; }

const char* ToString(Activation v) {
  switch (v) {
    case Activation::kGelu: return "gelu";
    case Activation::kSwiglu: return "swiglu";
    case Activation::kGeglu: return "geglu";
    case Activation::kSquaredRelu: return "squared_relu";
  }
  return "?";
}

const char* ToString(Normalization v) {
  switch (v) {
    case Normalization::kLayerNorm: return "layernorm";
    case Normalization::kRmsNorm: return "rmsnorm";
  }
  return "?";
}

const char* ToString(PositionEmbedding v) {
  switch (v) {
    case PositionEmbedding::kLearned: return "learned";
    case PositionEmbedding::kRope: return "rope";
  }
  return "?";
}

const char* ToString(Precision v) {
  switch (v) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp8: return "fp8";
    case Precision::kMxfp8: return "mxfp8";
    case Precision::kNvfp4: return "nvfp4";
  }
  return "?";
}

bool IsLowPrecisionGemm(Precision p) {
  return p == Precision::kFp8 || p == Precision::kMxfp8 || p == Precision::kNvfp4;
}

const char* ToString(Recompute v) {
  switch (v) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

const char* ToString(RecomputeModule v) {
  switch (v) {
    case RecomputeModule::kCoreAttn: return "core_attn";
    case RecomputeModule::kLayernorm: return "layernorm";
    case RecomputeModule::kMlp: return "mlp";
    case RecomputeModule::kMoeAct: return "moe_act";
    case RecomputeModule::kMoe: return "moe";
    case RecomputeModule::kSharedExperts: return "shared_experts";
    case RecomputeModule::kMlaUpProj: return "mla_up_proj";
  }
  return "?";
}

const char* ToString(OffloadModule v) {
  switch (v) {
    case OffloadModule::kAttnNorm: return "attn_norm";
    case OffloadModule::kQkvLinear: return "qkv_linear";
    case OffloadModule::kCoreAttn: return "core_attn";
    case OffloadModule::kAttnProj: return "attn_proj";
    case OffloadModule::kMlpNorm: return "mlp_norm";
    case OffloadModule::kExpertFc1: return "expert_fc1";
    case OffloadModule::kMoeAct: return "moe_act";
  }
  return "?";
}

bool IsFlash(AttentionKernel k) {
  return k == AttentionKernel::kFlash3 || k == AttentionKernel::kFlash2 ||
         k == AttentionKernel::kFlash1 || k == AttentionKernel::kCudnn;
}

const char* ToString(AttentionKernel v) {
  switch (v) {
    case AttentionKernel::kFlash3: return "flash3";
    case AttentionKernel::kFlash2: return "flash2";
    case AttentionKernel::kFlash1: return "flash1";
    case AttentionKernel::kCudnn: return "cudnn";
    case AttentionKernel::kFused: return "fused";
    case AttentionKernel::kUnfused: return "unfused";
  }
  return "?";
}

const char* ToString(CollectiveOp v) {
  switch (v) {
    case CollectiveOp::kAllReduce: return "all_reduce";
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kReduceScatter: return "reduce_scatter";
    case CollectiveOp::kSendRecv: return "send_recv";
    case CollectiveOp::kAllToAll: return "all_to_all";
  }
  return "?";
}

const char* ToString(StageExtras v) {
  switch (v) {
    case StageExtras::kNone: return "none";
    case StageExtras::kFirst: return "first";
    case StageExtras::kLast: return "last";
  }
  return "?";
}

const char* ToString(Objective v) {
  switch (v) {
    case Objective::kThroughput: return "throughput";
    case Objective::kMinMemory: return "min_memory";
  }
  return "?";
}

const char* ToString(SearchMode v) {
  switch (v) {
    case SearchMode::kModel: return "model";
    case SearchMode::kProfile: return "profile";
  }
  return "?";
}

const char* ToString(AttentionType v) {
  switch (v) {
    case AttentionType::kMha:
      return "mha";
    case AttentionType::kGqa:
      return "gqa";
    case AttentionType::kMla:
      return "mla";
  }
  return "?";
}

const char* ToString(MoeTokenDispatcher v) {
  switch (v) {
    case MoeTokenDispatcher::kAllToAll:
      return "alltoall";
    case MoeTokenDispatcher::kAllGather:
      return "allgather";
    case MoeTokenDispatcher::kFlex:
      return "flex";
  }
  return "?";
}

const char* ToString(MoeRouting v) {
  switch (v) {
    case MoeRouting::kBalanced:
      return "balanced";
    case MoeRouting::kDropless:
      return "dropless";
    case MoeRouting::kCapacity:
      return "capacity";
  }
  return "?";
}

absl::StatusOr<Activation> ParseActivation(absl::string_view s) {
  static constexpr Activation kAll[] = {Activation::kGelu, Activation::kSwiglu,
                                        Activation::kGeglu, Activation::kSquaredRelu};
  return ParseEnum("activation", s, kAll);
}

absl::StatusOr<Normalization> ParseNormalization(absl::string_view s) {
  static constexpr Normalization kAll[] = {Normalization::kLayerNorm, Normalization::kRmsNorm};
  return ParseEnum("normalization", s, kAll);
}

absl::StatusOr<PositionEmbedding> ParsePositionEmbedding(absl::string_view s) {
  static constexpr PositionEmbedding kAll[] = {PositionEmbedding::kLearned,
                                               PositionEmbedding::kRope};
  return ParseEnum("position embedding", s, kAll);
}

absl::StatusOr<Precision> ParsePrecision(absl::string_view s) {
  static constexpr Precision kAll[] = {Precision::kFp32,  Precision::kBf16,
                                       Precision::kFp16,  Precision::kFp8,
                                       Precision::kMxfp8, Precision::kNvfp4};
  return ParseEnum("precision", s, kAll);
}

absl::StatusOr<Recompute> ParseRecompute(absl::string_view s) {
  static constexpr Recompute kAll[] = {Recompute::kNone, Recompute::kSelective,
                                       Recompute::kFull};
  return ParseEnum("recompute", s, kAll);
}

absl::StatusOr<RecomputeModule> ParseRecomputeModule(absl::string_view s) {
  static constexpr RecomputeModule kAll[] = {
      RecomputeModule::kCoreAttn, RecomputeModule::kLayernorm,     RecomputeModule::kMlp,
      RecomputeModule::kMoeAct,   RecomputeModule::kMoe,           RecomputeModule::kSharedExperts,
      RecomputeModule::kMlaUpProj};
  return ParseEnum("recompute module", s, kAll);
}

absl::StatusOr<OffloadModule> ParseOffloadModule(absl::string_view s) {
  static constexpr OffloadModule kAll[] = {
      OffloadModule::kAttnNorm, OffloadModule::kQkvLinear, OffloadModule::kCoreAttn,
      OffloadModule::kAttnProj, OffloadModule::kMlpNorm,   OffloadModule::kExpertFc1,
      OffloadModule::kMoeAct};
  return ParseEnum("offload module", s, kAll);
}

absl::StatusOr<AttentionKernel> ParseAttentionKernel(absl::string_view s) {
  static constexpr AttentionKernel kAll[] = {AttentionKernel::kFlash3, AttentionKernel::kFlash2,
                                             AttentionKernel::kFlash1, AttentionKernel::kCudnn,
                                             AttentionKernel::kFused, AttentionKernel::kUnfused};
  return ParseEnum("attention kernel", s, kAll);
}

absl::StatusOr<CollectiveOp> ParseCollectiveOp(absl::string_view s) {
  static constexpr CollectiveOp kAll[] = {CollectiveOp::kAllReduce, CollectiveOp::kAllGather,
                                          CollectiveOp::kReduceScatter, CollectiveOp::kSendRecv,
                                          CollectiveOp::kAllToAll};
  return ParseEnum("collective op", s, kAll);
}

absl::StatusOr<StageExtras> ParseStageExtras(absl::string_view s) {
  static constexpr StageExtras kAll[] = {StageExtras::kNone, StageExtras::kFirst,
                                         StageExtras::kLast};
  return ParseEnum("stage extras", s, kAll);
}

absl::StatusOr<Objective> ParseObjective(absl::string_view s) {
  static constexpr Objective kAll[] = {Objective::kThroughput, Objective::kMinMemory};
  return ParseEnum("objective", s, kAll);
}

absl::StatusOr<SearchMode> ParseSearchMode(absl::string_view s) {
  static constexpr SearchMode kAll[] = {SearchMode::kModel, SearchMode::kProfile};
  return ParseEnum("search mode", s, kAll);
}

absl::StatusOr<AttentionType> ParseAttentionType(absl::string_view s) {
  static constexpr AttentionType kAll[] = {AttentionType::kMha, AttentionType::kGqa,
                                           AttentionType::kMla};
  return ParseEnum("attention", s, kAll);
}

absl::StatusOr<MoeTokenDispatcher> ParseMoeTokenDispatcher(absl::string_view s) {
  static constexpr MoeTokenDispatcher kAll[] = {
      MoeTokenDispatcher::kAllToAll, MoeTokenDispatcher::kAllGather, MoeTokenDispatcher::kFlex};
  return ParseEnum("moe token dispatcher", s, kAll);
}

absl::StatusOr<MoeRouting> ParseMoeRouting(absl::string_view s) {
  static constexpr MoeRouting kAll[] = {MoeRouting::kBalanced, MoeRouting::kDropless,
                                        MoeRouting::kCapacity};
  return ParseEnum("moe routing", s, kAll);
}

const char* ToString(Offload v) {
  switch (v) {
    case Offload::kNone: return "none";
    case Offload::kOptimizer: return "optimizer";
    case Offload::kOptimizerAndParams: return "optimizer_and_params";
  }
  return "?";
}

const char* ToString(DataParallelSharding v) {
  switch (v) {
    case DataParallelSharding::kNone:
      return "none";
    case DataParallelSharding::kOptimizer:
      return "optimizer";
    case DataParallelSharding::kOptimizerGrads:
      return "optimizer_grads";
    case DataParallelSharding::kFull:
      return "full";
  }
  return "?";
}

const char* ToString(Framework v) {
  switch (v) {
    case Framework::kMegatronCore:
      return "megatron-core";
    case Framework::kNemo:
      return "nemo";
    case Framework::kMegatronDeepspeed:
      return "megatron-deepspeed";
    case Framework::kDeepspeed:
      return "deepspeed";
    case Framework::kTorchtitan:
      return "torchtitan";
    case Framework::kLlmFoundry:
      return "llm-foundry";
    case Framework::kNemoAutomodel:
      return "nemo-automodel";
  }
  return "?";
}

namespace {
constexpr Framework kAllFrameworks[] = {Framework::kMegatronCore,      Framework::kNemo,
                                        Framework::kMegatronDeepspeed, Framework::kDeepspeed,
                                        Framework::kTorchtitan,        Framework::kLlmFoundry,
                                        Framework::kNemoAutomodel};
}  // namespace

const std::vector<Framework>& AllFrameworks() {
  static const std::vector<Framework>* const kAll =
      new std::vector<Framework>(std::begin(kAllFrameworks), std::end(kAllFrameworks));
  return *kAll;
}

absl::StatusOr<Framework> ParseFramework(absl::string_view s) {
  return ParseEnum("framework", s, kAllFrameworks);
}

absl::StatusOr<Offload> ParseOffload(absl::string_view s) {
  static constexpr Offload kAll[] = {Offload::kNone, Offload::kOptimizer,
                                     Offload::kOptimizerAndParams};
  return ParseEnum("offload", s, kAll);
}

absl::StatusOr<DataParallelSharding> ParseDataParallelSharding(absl::string_view s) {
  static constexpr DataParallelSharding kAll[] = {
      DataParallelSharding::kNone, DataParallelSharding::kOptimizer,
      DataParallelSharding::kOptimizerGrads, DataParallelSharding::kFull};
  return ParseEnum("data parallel sharding", s, kAll);
}

}  // namespace paratune
