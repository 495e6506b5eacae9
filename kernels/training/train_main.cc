// paratune-train: runs ranks [first, first + count) of one training job (kernels/training)
// as threads of this process. The job's other ranks run in other processes started with
// the same flags and the same --store directory (a Gloo FileStore: processes on one host
// or on a shared filesystem). Prints the job's per-step loss and slowest-rank time and this
// process's ranks' peak memory as JSON.
//
//   paratune-train --tp 2 --pp 2 --dp 1 --ranks 0:2 --store /tmp/job1 &
//   paratune-train --tp 2 --pp 2 --dp 1 --ranks 2:2 --store /tmp/job1
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/training/training.h"
#include "nlohmann/json.hpp"

int main(int argc, char** argv) {
  namespace kt = paratune::kernels::training;
  namespace k = paratune::kernels;
  kt::TrainConfig c;
  c.shape.hidden_size = 64;
  c.shape.num_attention_heads = 4;
  c.shape.vocab_size = 128;
  c.num_layers = 4;
  c.seq_length = 32;
  std::string ranks, store, recompute = "none", backend = "cpu", dtype = "fp32";
  CLI::App app{"paratune-train: ranks of one multi-process training job"};
  app.add_option("--hidden", c.shape.hidden_size, "hidden size h");
  app.add_option("--heads", c.shape.num_attention_heads, "attention heads a");
  app.add_option("--ffn", c.shape.ffn_hidden_size, "FFN size (0 = 4h)");
  app.add_option("--vocab", c.shape.vocab_size, "vocabulary size V");
  app.add_option("--layers", c.num_layers, "transformer layers L");
  app.add_option("--seq", c.seq_length, "sequence length s");
  app.add_option("--micro-batch", c.parallel.micro_batch_size, "micro-batch size b");
  app.add_option("--micro-batches", c.num_micro_batches, "micro-batches per DP rank and step");
  app.add_option("--tp", c.parallel.tp, "tensor parallel size");
  app.add_option("--pp", c.parallel.pp, "pipeline stages");
  app.add_option("--dp", c.parallel.dp, "data parallel size");
  app.add_option("--vp", c.parallel.vp, "model chunks per pipeline rank (interleaved when > 1)");
  app.add_flag("--sp", c.parallel.sequence_parallel, "sequence parallelism");
  app.add_option("--recompute", recompute, "none | selective | full");
  bool distributed_optimizer = false;
  app.add_flag("--distributed-optimizer", distributed_optimizer, "ZeRO-1 over DP");
  app.add_option("--steps", c.steps, "optimizer steps");
  app.add_option("--lr", c.lr, "AdamW learning rate");
  app.add_option("--seed", c.seed, "weights and data seed");
  app.add_flag("--flash", c.flash_attention, "flash attention (no s×s scores stored)");
  app.add_option("--window-size", c.attention_window,
                 "sliding-window attention: keys per query, itself included (0: none)");
  app.add_option("--window-attn-skip-freq", c.window_attn_skip_freq,
                 "every n-th layer attends to the whole sequence (0: none)");
  app.add_flag("--dropout", c.dropout, "Megatron's dropout 0.1 (embedding output and every layer)");
  app.add_flag("--tie-embeddings", c.tie_embeddings,
               "the output layer uses the input embedding's table (GPT's default)");
  app.add_option("--position-rows", c.position_rows,
                 "rows of a learned position table (GPT's; 0: none, at least --seq)");
  app.add_option("--experts", c.moe.num_experts, "routed experts per expert layer (0: dense)");
  app.add_option("--topk", c.moe.topk, "experts per token");
  app.add_option("--expert-ffn", c.moe.ffn_hidden, "FFN size of one routed expert");
  app.add_option("--shared-experts", c.moe.num_shared_experts, "shared experts per layer");
  app.add_option("--shared-expert-ffn", c.moe.shared_ffn_hidden, "FFN size of one shared expert");
  std::string routing = "dropless";
  app.add_option("--routing", routing, "dropless | balanced | capacity");
  app.add_option("--capacity-factor", c.moe.capacity_factor, "capacity routing's factor");
  app.add_option("--aux-loss-coeff", c.moe.aux_loss_coeff, "Switch load-balancing loss");
  app.add_option("--first-k-dense", c.first_k_dense_layers, "dense layers before the experts");
  app.add_option("--moe-layer-freq", c.moe_layer_freq, "every n-th layer after them has experts");
  app.add_option("--ep", c.parallel.ep, "expert parallel size (folded into tp·dp)");
  app.add_option("--etp", c.parallel.etp, "expert tensor parallel size (1 or tp)");
  app.add_option("--backend", backend, "cpu | cuda (one device per rank of this process)");
  app.add_option("--dtype", dtype, "fp32 | bf16 | fp16 (16-bit: cuda, fp32 master weights)");
  app.add_option("--ranks", ranks, "FIRST:COUNT ranks run here (default: all)");
  app.add_option("--store", store, "FileStore directory shared by the job's processes");
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<paratune::Recompute> rm = paratune::ParseRecompute(recompute);
  if (!rm.ok()) {
    std::cerr << "--recompute: " << rm.status().message() << "\n";
    return 2;
  }
  c.parallel.recompute = *rm;
  if (routing == "dropless") {
    c.moe.routing = k::ExpertRouting::kDropless;
  } else if (routing == "balanced") {
    c.moe.routing = k::ExpertRouting::kBalanced;
  } else if (routing == "capacity") {
    c.moe.routing = k::ExpertRouting::kCapacity;
  } else {
    std::cerr << "--routing (" << routing << ") must be dropless, balanced or capacity\n";
    return 2;
  }
  if (distributed_optimizer) {
    c.parallel.data_parallel_sharding = paratune::DataParallelSharding::kOptimizer;
  }
  absl::StatusOr<k::BackendKind> bk = k::ParseBackendKind(backend);
  if (!bk.ok()) {
    std::cerr << "--backend: " << bk.status().message() << "\n";
    return 2;
  }
  c.backend = *bk;
  absl::StatusOr<k::DType> dt = k::ParseDType(dtype);
  if (!dt.ok()) {
    std::cerr << "--dtype: " << dt.status().message() << "\n";
    return 2;
  }
  c.dtype = *dt;
  if (absl::Status s = c.Validate(); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  int64_t first = 0, count = c.world_size();
  if (!ranks.empty()) {
    std::vector<std::string> parts = absl::StrSplit(ranks, ':');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &first) ||
        !absl::SimpleAtoi(parts[1], &count)) {
      std::cerr << "--ranks (" << ranks << ") must be FIRST:COUNT\n";
      return 2;
    }
  }
  if (count < c.world_size() && store.empty()) {
    std::cerr << "--store is required when --ranks runs only part of the job\n";
    return 2;
  }
  auto rendezvous = store.empty() ? k::MakeInProcessRendezvous() : k::MakeFileRendezvous(store);
  absl::StatusOr<kt::TrainResult> r = kt::RunTraining(c, first, count, rendezvous);
  if (!r.ok()) {
    std::cerr << r.status() << "\n";
    return 1;
  }
  nlohmann::json j;
  j["losses"] = r->losses;
  j["step_seconds"] = r->step_seconds;
  for (const kt::RankResult& rr : r->ranks) {
    j["ranks"].push_back({{"rank", rr.rank},
                          {"peak_bytes", rr.peak_bytes},
                          {"parameters", rr.parameter_count},
                          {"expert_parameters", rr.expert_parameter_count},
                          {"step_seconds", rr.step_seconds},
                          {"dp_seconds", rr.dp_seconds},
                          {"optimizer_seconds", rr.optimizer_seconds},
                          {"p2p_wait_seconds", rr.p2p_wait_seconds}});
  }
  std::cout << j.dump() << "\n";
  return 0;
}
