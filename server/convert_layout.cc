#include "server/convert_layout.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/enums.h"

namespace paratune::server {

v1::ParallelConfig ToProto(const ParallelConfig& c) {
  v1::ParallelConfig out;
  out.set_tp(c.tp);
  out.set_pp(c.pp);
  out.set_dp(c.dp);
  out.set_cp(c.cp);
  out.set_vp(c.vp);
  out.set_micro_batch_size(c.micro_batch_size);
  out.set_sequence_parallel(c.sequence_parallel);
  out.set_recompute(ToString(c.recompute));
  out.set_recompute_num_layers(c.recompute_num_layers);
  out.set_distributed_optimizer(c.distributed_optimizer());
  out.set_split_counts_embedding_and_loss(c.split_counts_embedding_and_loss);
  out.set_overlap_grad_reduce(c.overlap_grad_reduce);
  out.set_tp_comm_overlap(c.tp_comm_overlap);
  out.set_overlap_p2p_comm(c.overlap_p2p_comm);
  out.set_overlap_param_gather(c.overlap_param_gather);
  out.set_ep(c.ep);
  out.set_etp(c.etp);
  out.set_moe_token_dispatcher(ToString(c.moe_token_dispatcher));
  out.set_data_parallel_sharding(ToString(c.data_parallel_sharding));
  out.set_shard_group_size(c.shard_group_size);
  if (c.offload != Offload::kNone) out.set_offload(ToString(c.offload));
  out.set_activation_offload(c.activation_offload);
  return out;
}

absl::StatusOr<ParallelConfig> ParallelConfigFromProto(const v1::ParallelConfig& c) {
  ParallelConfig out;
  out.tp = c.tp();
  out.pp = c.pp();
  out.dp = c.dp();
  out.cp = c.cp();
  out.vp = c.vp();
  out.micro_batch_size = c.micro_batch_size();
  out.sequence_parallel = c.sequence_parallel();
  absl::StatusOr<Recompute> rc = ParseRecompute(c.recompute());
  if (!rc.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("recompute: ", rc.status().message()));
  }
  out.recompute = *rc;
  out.recompute_num_layers = c.recompute_num_layers();
  out.split_counts_embedding_and_loss = c.split_counts_embedding_and_loss();
  if (c.has_overlap_grad_reduce()) out.overlap_grad_reduce = c.overlap_grad_reduce();
  out.tp_comm_overlap = c.tp_comm_overlap();
  if (c.has_overlap_p2p_comm()) out.overlap_p2p_comm = c.overlap_p2p_comm();
  if (c.has_overlap_param_gather()) out.overlap_param_gather = c.overlap_param_gather();
  if (c.has_ep()) out.ep = c.ep();
  if (c.has_etp()) out.etp = c.etp();
  if (!c.moe_token_dispatcher().empty()) {
    absl::StatusOr<MoeTokenDispatcher> d = ParseMoeTokenDispatcher(c.moe_token_dispatcher());
    if (!d.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("moe_token_dispatcher: ", d.status().message()));
    }
    out.moe_token_dispatcher = *d;
  }
  // A layout stored before data_parallel_sharding existed carries distributed_optimizer only.
  if (c.data_parallel_sharding().empty()) {
    out.data_parallel_sharding =
        c.distributed_optimizer() ? DataParallelSharding::kOptimizer : DataParallelSharding::kNone;
  } else {
    absl::StatusOr<DataParallelSharding> sharding =
        ParseDataParallelSharding(c.data_parallel_sharding());
    if (!sharding.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data_parallel_sharding: ", sharding.status().message()));
    }
    out.data_parallel_sharding = *sharding;
  }
  out.shard_group_size = c.shard_group_size();
  if (!c.offload().empty()) {
    absl::StatusOr<Offload> offload = ParseOffload(c.offload());
    if (!offload.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("offload: ", offload.status().message()));
    }
    out.offload = *offload;
  }
  out.activation_offload = c.activation_offload();
  return out;
}

}  // namespace paratune::server
