#include "search/parallel_config.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "search/framework_profile.h"
#include "search/model_math.h"

namespace paratune {
namespace {

absl::Status Positive(const char* field, int64_t value) {
  if (value < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("%s (%d) must be >= 1", field, value));
  }
  return absl::OkStatus();
}

// Megatron-Core's MoE parallel folding (arXiv 2504.14960): the expert layers regroup the
// tp*cp*dp ranks of a pipeline stage as etp*ep*edp, independently of the attention's
// tp*cp*dp. EP splits the routed experts, ETP each expert's FFN width; the shared experts
// run with the attention's TP.
absl::Status ValidateExpertLayout(const ParallelConfig& c, const JobSpec& spec) {
  const ModelSpec& m = spec.model;
  if (absl::Status s = Positive("search.ep", c.ep); !s.ok()) return s;
  if (absl::Status s = Positive("search.etp", c.etp); !s.ok()) return s;
  if (m.num_experts <= 1) {
    if (c.ep != 1 || c.etp != 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("search.ep (%d) and search.etp (%d) must be 1: the model has no experts "
                          "(model.num_experts %d)",
                          c.ep, c.etp, m.num_experts));
    }
    if (c.moe_token_dispatcher != MoeTokenDispatcher::kAllToAll) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "search.moe_token_dispatcher (%s) applies only to mixture-of-experts models",
          ToString(c.moe_token_dispatcher)));
    }
    return absl::OkStatus();
  }
  if (m.num_experts % c.ep != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("search.ep (%d) must divide model.num_experts (%d)", c.ep, m.num_experts));
  }
  if (m.moe_ffn_hidden_size % c.etp != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("search.etp (%d) must divide model.moe_ffn_hidden_size (%d)", c.etp,
                        m.moe_ffn_hidden_size));
  }
  const int64_t attention_ranks = c.tp * c.cp * c.dp;
  if (attention_ranks % (c.etp * c.ep) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "search.etp*search.ep (%d*%d = %d) must divide search.tp*search.cp*search.dp "
        "(%d*%d*%d = %d): the expert layers fold the same ranks as etp*ep*edp",
        c.etp, c.ep, c.etp * c.ep, c.tp, c.cp, c.dp, attention_ranks));
  }
  if (c.tp > 1 && !c.sequence_parallel) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "search.sequence_parallel is required with search.tp (%d) > 1 in a mixture-of-experts "
        "model (Megatron-Core dispatches the sequence-parallel tokens)",
        c.tp));
  }
  if (m.num_shared_experts > 0 && SharedExpertFfn(m) % c.tp != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "search.tp (%d) must divide the shared experts' FFN width (%d)", c.tp, SharedExpertFfn(m)));
  }
  if (c.ep * c.etp == 1 && c.moe_token_dispatcher != MoeTokenDispatcher::kAllToAll) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "search.moe_token_dispatcher (%s) needs search.ep*search.etp > 1 (every expert is "
        "local; nothing is dispatched)",
        ToString(c.moe_token_dispatcher)));
  }
  return absl::OkStatus();
}

// Sharding needs a group to shard over; an HSDP shard group divides the dp*cp group.
absl::Status ValidateDataParallelSharding(const ParallelConfig& c) {
  const int64_t group = c.dp * c.cp;
  if (c.data_parallel_sharding != DataParallelSharding::kNone && group == 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "search.data_parallel_sharding %s requires search.dp*search.cp > 1 (there is nothing "
        "to shard over)",
        ToString(c.data_parallel_sharding)));
  }
  if (c.offload == Offload::kOptimizerAndParams &&
      c.data_parallel_sharding != DataParallelSharding::kFull) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "search.offload optimizer_and_params needs search.data_parallel_sharding full (the "
        "parameter shards are streamed to the GPU layer by layer, as ZeRO-3/FSDP gathers "
        "them); this layout has %s",
        ToString(c.data_parallel_sharding)));
  }
  if (c.shard_group_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("search.shard_group_size (%d) must not be negative", c.shard_group_size));
  }
  if (c.shard_group_size > 0) {
    if (c.data_parallel_sharding == DataParallelSharding::kNone) {
      return absl::InvalidArgumentError(
          "search.shard_group_size needs search.data_parallel_sharding other than none");
    }
    if (c.shard_group_size < 2 || group % c.shard_group_size != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "search.shard_group_size (%d) must be at least 2 and divide search.dp*search.cp (%d)",
          c.shard_group_size, group));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool SplitCountsEmbeddingAndLoss(const JobSpec& spec, int64_t pp, int64_t vp) {
  if (pp <= 1) return false;
  switch (ProfileOf(spec.training.framework).pipeline_split) {
    case PipelineSplit::kSlotsUneven:
      return true;
    case PipelineSplit::kLayersUneven:
      return false;
    case PipelineSplit::kDivides:
      break;
  }
  return spec.model.num_layers % (pp * std::max<int64_t>(vp, 1)) != 0;
}

int64_t PipelineSlots(const ModelSpec& m, const ParallelConfig& c) {
  return c.split_counts_embedding_and_loss ? m.num_layers + 2 + m.mtp_layers : m.num_layers;
}

int64_t DecoderLayersInChunk(const ModelSpec& m, const ParallelConfig& c, int64_t stage,
                             int64_t chunk) {
  if (!c.split_counts_embedding_and_loss || m.mtp_layers == 0) {
    return c.LayersInChunk(m.num_layers, stage, chunk);
  }
  // LayersInChunk takes the embedding's and the loss's slots; the MTP modules' slots are
  // the last chunk's too.
  const int64_t layers = c.LayersInChunk(m.num_layers + m.mtp_layers, stage, chunk);
  return stage == c.pp - 1 && chunk == c.vp - 1 ? layers - m.mtp_layers : layers;
}

int64_t DecoderLayersOnStage(const ModelSpec& m, const ParallelConfig& c, int64_t stage) {
  int64_t layers = 0;
  for (int64_t j = 0; j < c.vp; ++j) layers += DecoderLayersInChunk(m, c, stage, j);
  return layers;
}

int64_t NumMicroBatches(const ParallelConfig& config, const TrainingSpec& training) {
  const int64_t per_step = config.micro_batch_size * config.dp;
  if (per_step <= 0) return 0;
  return training.global_batch_size / per_step;
}

absl::Status ValidateParallelConfig(const ParallelConfig& c, const JobSpec& spec) {
  const ModelSpec& m = spec.model;
  const TrainingSpec& tr = spec.training;
  const ClusterSpec& cl = spec.cluster;
  for (auto [field, value] :
       {std::pair<const char*, int64_t>{"search.tp", c.tp}, {"search.pp", c.pp},
        {"search.dp", c.dp}, {"search.cp", c.cp}, {"search.vp", c.vp},
        {"search.micro_batch_size", c.micro_batch_size}}) {
    if (absl::Status s = Positive(field, value); !s.ok()) return s;
  }
  if (c.tp * c.pp * c.cp * c.dp != cl.num_gpus) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "search.tp*search.pp*search.cp*search.dp (%d*%d*%d*%d = %d) must equal "
        "cluster.num_gpus (%d)", c.tp, c.pp, c.cp,
        c.dp, c.tp * c.pp * c.cp * c.dp, cl.num_gpus));
  }
  if (m.num_attention_heads % c.tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("search.tp (%d) must divide model.num_attention_heads (%d)", c.tp,
                        m.num_attention_heads));
  }
  const int64_t groups = m.num_query_groups > 0 ? m.num_query_groups : m.num_attention_heads;
  if (groups % c.tp != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "search.tp (%d) must divide model.num_query_groups (%d)", c.tp, groups));
  }
  if (m.ffn_hidden_size % c.tp != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "search.tp (%d) must divide model.ffn_hidden_size (%d)", c.tp, m.ffn_hidden_size));
  }
  if (!spec.search.allow_tp_across_nodes && cl.gpus_per_node > 0) {
    if (c.tp > cl.gpus_per_node) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "search.tp (%d) must be <= cluster.gpus_per_node (%d) unless "
          "search.allow_tp_across_nodes is set",
          c.tp, cl.gpus_per_node));
    }
    if (cl.gpus_per_node % c.tp != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "search.tp (%d) must divide cluster.gpus_per_node (%d) so that TP groups stay inside a "
          "node, unless search.allow_tp_across_nodes is set",
          c.tp, cl.gpus_per_node));
    }
  }
  // torch.distributed.pipelining's frameworks split unevenly (the first virtual stages one
  // layer more); Megatron-Core's chunks divide the layers (or the slots).
  const bool uneven = ProfileOf(tr.framework).UnevenPipelineSplit();
  const int64_t chunks = c.pp * c.vp;
  if (c.split_counts_embedding_and_loss) {
    if (c.pp == 1) {
      return absl::InvalidArgumentError(
          "split_counts_embedding_and_loss requires search.pp > 1 (search.pp is 1)");
    }
    const int64_t slots = PipelineSlots(m, c);
    // A chunk may hold the embedding or the loss alone (the model zoo's Qwen3-235B runs
    // 94 layers as 32 x 3 chunks of one slot); with MTP modules the last chunk holds them,
    // the loss and at least one decoder layer.
    const int64_t min_slots = m.mtp_layers > 0 ? 2 + m.mtp_layers : 1;
    if (uneven && slots / chunks < min_slots) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "search.pp*search.vp (%d*%d = %d) must leave every model chunk at least %d of the "
          "%d pipeline slots (model.num_layers + 2%s: training.framework %s counts the "
          "embedding and the loss%s as one layer each)",
          c.pp, c.vp, chunks, min_slots, slots, m.mtp_layers > 0 ? " + model.mtp_layers" : "",
          ToString(tr.framework), m.mtp_layers > 0 ? " and each MTP module" : ""));
    }
    if (!uneven && (slots % chunks != 0 || slots / chunks < min_slots)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "search.pp*search.vp (%d*%d = %d) must divide model.num_layers + 2%s (%d: the "
          "embedding and the loss%s are counted as one layer each when the stages are split "
          "as Megatron-Core does) with at least %d per chunk",
          c.pp, c.vp, chunks, m.mtp_layers > 0 ? " + model.mtp_layers" : "", slots,
          m.mtp_layers > 0 ? " and each MTP module" : "", min_slots));
    }
  } else if (uneven) {
    if (m.num_layers < chunks) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "search.pp*search.vp (%d*%d = %d) must not exceed model.num_layers (%d): every "
          "model chunk holds at least one layer",
          c.pp, c.vp, chunks, m.num_layers));
    }
  } else {
    if (m.num_layers % c.pp != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "search.pp (%d) must divide model.num_layers (%d)", c.pp, m.num_layers));
    }
    if (c.vp > 1 && m.num_layers % chunks != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("search.pp*search.vp (%d*%d = %d) must divide model.num_layers (%d)",
                          c.pp, c.vp, chunks, m.num_layers));
    }
  }
  if (c.vp > 1 && c.pp == 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("search.vp (%d) > 1 requires search.pp > 1 (search.pp is 1)", c.vp));
  }
  if (tr.global_batch_size % (c.micro_batch_size * c.dp) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "search.micro_batch_size*search.dp (%d*%d = %d) must divide "
        "training.global_batch_size (%d)",
        c.micro_batch_size, c.dp, c.micro_batch_size * c.dp, tr.global_batch_size));
  }
  const int64_t micro_batches = NumMicroBatches(c, tr);
  // Megatron-LM's interleaved schedule runs micro-batches in groups of p.
  if (c.vp > 1 && micro_batches % c.pp != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the interleaved schedule (search.vp %d) needs micro-batches per iteration "
        "(training.global_batch_size / (search.micro_batch_size*search.dp) = %d) to be a "
        "multiple of search.pp (%d)",
        c.vp, micro_batches, c.pp));
  }
  if (c.sequence_parallel && c.tp == 1) {
    return absl::InvalidArgumentError(
        "search.sequence_parallel requires search.tp > 1 (search.tp is 1)");
  }
  if (c.tp_comm_overlap && !c.sequence_parallel) {
    return absl::InvalidArgumentError("tp_comm_overlap requires sequence_parallel");
  }
  if (auto s = CheckLayoutForFramework(c, tr.framework); !s.ok()) return s;
  if (c.cp > 1 && tr.seq_length % (2 * c.cp) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "training.seq_length (%d) must be divisible by 2*search.cp (%d)", tr.seq_length, 2 * c.cp));
  }
  if (c.recompute == Recompute::kFull) {
    const int64_t per_stage = DecoderLayersOnStage(m, c, c.pp - 1);
    if (c.recompute_num_layers < 0 || c.recompute_num_layers > per_stage) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "search.recompute_num_layers (%d) must be in [0, layers per stage = %d] (0 = all)",
          c.recompute_num_layers, per_stage));
    }
  } else if (c.recompute_num_layers != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "search.recompute_num_layers (%d) is only meaningful with search.recompute full",
        c.recompute_num_layers));
  }
  if (auto s = ValidateDataParallelSharding(c); !s.ok()) return s;
  return ValidateExpertLayout(c, spec);
}

}  // namespace paratune
