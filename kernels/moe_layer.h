// A mixture-of-experts layer on a Backend (cpu: fp32 / fp64; cuda: fp32 / bf16 / fp16,
// the router in fp32 as Megatron-Core's), forward and backward, laid out as
// Megatron-Core's MoELayer with the all-to-all token dispatcher:
//   router (TopKRouter: softmax or sigmoid scores, top-k or balanced assignment, optional
//   normalisation of the top-k probabilities, Switch auxiliary loss) → permute (rows sorted
//   by expert) → dispatch all-to-all over the EP group → grouped SwiGLU expert MLPs, each
//   split over the ETP group (fc1 column-parallel, fc2 row-parallel, all-reduce of the fc2
//   output) → combine all-to-all → unpermute (Σ_j prob_j · expert output_j per token)
//   + shared experts (one SwiGLU MLP of num_shared · shared_ffn columns, split over ETP).
// Tokens: each EP rank routes its own tokens; the ranks of one ETP group hold the same
// tokens (as TP ranks without sequence parallelism), so the ETP all-reduces are
// reduce_from_tp_region (fwd: all-reduce, bwd: identity) on the outputs and
// copy_to_tp_region (fwd: identity, bwd: all-reduce) on the inputs. The auxiliary loss is
// over every token of the EP group (counts and probability sums all-reduced), so it is the
// same number on every layout; each rank's gradient covers its own tokens, and the router
// gradient is the sum over the EP ranks (the data-parallel reduction sums it).
// Memory goes through the backend's TrackingAllocator (weights, gradients, stored
// activations and dispatch workspace), so a shape too large is ResourceExhausted, not a
// crash. The routing's bookkeeping (counts, the permutation, the all-to-all's split) is on
// the host, as Megatron-Core's tokens_per_expert is; on CUDA the selected experts come to
// the host and the permutation goes back. The auxiliary loss and capacity routing (dropped
// assignments) run on the cpu backend only.
// Thread-safety: one MoeLayer belongs to one rank (one thread).
#ifndef PARATUNE_KERNELS_MOE_LAYER_H_
#define PARATUNE_KERNELS_MOE_LAYER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/communicator.h"
#include "kernels/tensor.h"

namespace paratune::kernels {

class Backend;  // kernels/backend.h (which includes this header through layer_config.h)

/// How router logits become scores: softmax over the experts (Mixtral, Qwen3) or an
/// elementwise sigmoid (DeepSeek-V3).
enum class MoeScoreFunction { kSoftmax, kSigmoid };
/// Which experts a token goes to: its top-k (dropless: however unevenly), the forced
/// uniform assignment benchmarks use (every expert the same count), or its top-k with each
/// expert taking at most ⌈T·k/E · capacity_factor⌉ of a rank's T tokens' assignments (the
/// highest-probability ones; the others are dropped and contribute nothing).
enum class ExpertRouting { kDropless, kBalanced, kCapacity };

struct MoeLayerConfig {
  int64_t hidden = 0;              ///< Hidden size h.
  int64_t num_experts = 0;         ///< Routed experts E.
  int64_t topk = 1;                ///< Experts per token k.
  int64_t ffn_hidden = 0;          ///< FFN size of one routed expert.
  int64_t num_shared_experts = 0;  ///< Shared experts every token goes through.
  int64_t shared_ffn_hidden = 0;   ///< FFN size of one shared expert.
  MoeScoreFunction score = MoeScoreFunction::kSoftmax;  ///< Router score function.
  bool normalize_topk = false;  ///< Divide the top-k probabilities by their sum.
  double topk_scaling = 1.0;    ///< Factor on the top-k probabilities (DeepSeek-V3: 2.5).
  ExpertRouting routing = ExpertRouting::kDropless;  ///< Top-k, forced uniform or capped.
  double capacity_factor = 0;   ///< kCapacity: the cap's factor (> 0); unused otherwise.
  double aux_loss_coeff = 0.0;  ///< Switch load-balancing loss coefficient (0: none).
  int64_t ep = 1;               ///< Expert parallel size (divides num_experts).
  int64_t etp = 1;              ///< Expert tensor parallel size (divides the FFN sizes).
  /// The local experts' GEMMs as one grouped call per projection (Backend::GroupedGemm: on
  /// CUDA one cuBLAS grouped batched GEMM); false: one GEMM call per expert, which measured
  /// faster on an H200 (expert forward 0.61 against 1.06 ms at 16 experts, 3.2 against
  /// 4.5 ms at 128; docs/validation.md), so it is the default.
  bool grouped_gemm = false;
  /// Every rank of the EP group holds the same tokens: serving, where the engines
  /// (TensorRT-LLM's moe_ep_size x moe_tp_size = tp, vLLM's enable_expert_parallel) fold
  /// EP and ETP into the attention TP group. Nothing is dispatched: each EP rank runs its
  /// local experts on the rows routed to them, the shared experts are split over all
  /// ep x etp ranks, and Forward leaves its output a partial sum over the EP x ETP group,
  /// which the caller all-reduces (once, with its own TP reduction). Needs forward_only.
  bool tokens_replicated = false;
  /// Serving: no gradients are made and Backward is refused.
  bool forward_only = false;
  /// The routed and shared experts' MLPs run outside the layer (MoeLayer::SetExpertMlps:
  /// weight-only quantized experts); the layer makes only the router's weights. Needs
  /// forward_only.
  bool external_expert_mlps = false;

  /// The first violated rule, naming the field.
  absl::Status Validate() const;
  int64_t local_experts() const { return num_experts / ep; }
  int64_t shared_ffn_total() const { return num_shared_experts * shared_ffn_hidden; }
  /// Ranks the shared experts' FFN is split over: etp, or ep x etp with replicated tokens.
  int64_t shared_split() const { return tokens_replicated ? ep * etp : etp; }
  /// The rank's (ep_rank, etp_rank) slice of routed expert `expert` (global index) or, when
  /// expert < 0, of the shared experts.
  struct FfnShard FfnShardOf(int64_t expert, int64_t ep_rank, int64_t etp_rank) const;
};

/// One rank's slice of an expert FFN in MoeWeights' layout: fc1 [E, 2·ffn, h] (gate rows,
/// then up rows) and fc2 [E, h, ffn]; the shared experts are one "expert" of their tensors.
struct FfnShard {
  int64_t expert = 0;  ///< Index in the tensors (0 for the shared experts).
  int64_t ffn = 0;     ///< Full FFN width.
  int64_t width = 0;   ///< The rank's slice of it.
  int64_t slice = 0;   ///< Which slice.
  /// Flat index of row r (column 0) of the rank's fc1 shard [2·width, h].
  int64_t Fc1Row(int64_t r, int64_t h) const {
    return (expert * 2 * ffn + (r / width) * ffn + slice * width + r % width) * h;
  }
  /// Flat index of row r (column 0) of the rank's fc2 shard [h, width].
  int64_t Fc2Row(int64_t r, int64_t h) const { return (expert * h + r) * ffn + slice * width; }
};

/// Element i of full weight tensor `tensor` (1 router, 2 fc1, 3 fc2, 4 shared_fc1,
/// 5 shared_fc2) of MoeWeights<T>::Random(config, seed, scale).
double MoeRandomWeight(uint64_t seed, int tensor, int64_t i, double scale);

/// Unsharded weights, row-major, y = x·Wᵀ: router [E, h]; fc1 [E, 2f, h] (gate rows, then
/// up rows); fc2 [E, h, f]; shared_fc1 [2·fs, h]; shared_fc2 [h, fs] with fs = num_shared ·
/// shared_ffn. Every layout is initialised from the same weights so layouts compare.
template <typename T>
struct MoeWeights {
  std::vector<T> router, fc1, fc2, shared_fc1, shared_fc2;
  /// Uniform in [−scale, scale) from a hash of (seed, tensor, index).
  static MoeWeights Random(const MoeLayerConfig& config, uint64_t seed, double scale);
};

/// The all-to-all dispatcher's route over the EP group for one batch of permuted rows
/// (sorted by global expert): rows to and from each EP rank, and how many rows each rank
/// sends for each local expert. Dispatch regroups the received rows expert-major; Combine
/// is its inverse.
class AllToAllTokenDispatcher {
 public:
  /// `ep` (and `backend`, whose memory the rows are in; null: host memory) outlive the
  /// dispatcher.
  /// `replicated`: every EP rank holds the same rows (MoeLayerConfig::tokens_replicated):
  /// nothing is exchanged, a rank keeps the rows of its local experts.
  AllToAllTokenDispatcher(Communicator* ep, int64_t num_experts, int64_t hidden, DType dtype,
                          Backend* backend = nullptr, bool replicated = false);

  /// Exchanges the per-expert counts (an all-to-all of E/ep counts per rank).
  absl::Status Plan(const std::vector<int64_t>& tokens_per_expert);
  /// Device memory of 2·num_experts fp64 values that Plan stages the counts through on a
  /// device backend (made once, so that no rank fails to allocate it mid-exchange).
  void set_device_scratch(const Tensor& scratch) { scratch_ = scratch; }
  /// Rows this rank's local experts receive in total, and per local expert.
  int64_t received_rows() const { return received_rows_; }
  const std::vector<int64_t>& local_tokens_per_expert() const { return local_counts_; }
  /// in: this rank's permuted rows [Σ tokens_per_expert, h]; out: the local experts' rows,
  /// expert-major [received_rows(), h]. `workspace` holds received_rows()·h elements.
  absl::Status Dispatch(const void* in, void* out, void* workspace);
  /// The inverse: in expert-major [received_rows(), h] → out [Σ tokens_per_expert, h].
  /// Replicated: the local experts' rows go to their places in out; the other rows of out
  /// are left as they are (the caller zeroes them).
  absl::Status Combine(const void* in, void* out, void* workspace);

 private:
  absl::Status Regroup(const char* src, char* dst, bool to_expert_major) const;

  absl::Status CopyRows(void* dst, const void* src, int64_t rows) const;

  Communicator* ep_;
  Backend* backend_;
  bool replicated_;
  int64_t first_row_ = 0;  // replicated: the first permuted row of this rank's experts
  Tensor scratch_;
  int64_t num_experts_, hidden_;
  DType dtype_;
  std::vector<int64_t> send_rows_, recv_rows_;  // per EP rank
  std::vector<int64_t> recv_counts_;            // [ep, local experts]
  std::vector<int64_t> local_counts_;
  int64_t received_rows_ = 0;
};

/// What one Forward keeps for its Backward: the routing, the dispatcher's route and the
/// stored activations. MoeLayer::TakeSaved moves it out and RestoreSaved back, so that a
/// pipeline schedule keeps several micro-batches in flight through one layer.
struct MoeSaved {
  int64_t tokens = 0;
  int64_t routed_rows = 0;  // permuted rows: T·k less the dropped assignments
  std::vector<int64_t> tokens_per_expert;
  std::vector<double> global_counts;
  std::optional<AllToAllTokenDispatcher> route;
  Tensor x, scores, selected, probs, perm;   // perm[i] = t·k + j of permuted row i
  Tensor expert_in, expert_fc1, expert_act;  // expert-major rows of local experts
  Tensor combined;                           // expert outputs back in permuted order
  Tensor shared_fc1, shared_act;

  bool defined() const { return x.defined(); }
  /// (name, bytes) of every kept tensor.
  std::vector<std::pair<std::string, int64_t>> Breakdown() const;
};

/// A parameter's value and gradient tensors, which an owner of flat buffers may rebind to
/// views of its buffers (kernels/training).
struct ParameterRef {
  Tensor* value = nullptr;
  Tensor* grad = nullptr;
};

/// One rank's shards (see MoeWeights for the full shapes): router [E, h]; fc1
/// [E/ep, 2f/etp, h] (gate shard, then up shard); fc2 [E/ep, h, f/etp]; shared_fc1
/// [2fs/etp, h]; shared_fc2 [h, fs/etp].
struct MoeParams {
  Tensor router, fc1, fc2, shared_fc1, shared_fc2;
};

/// Where one Forward or Backward spent its time (seconds, steady clock): the dispatch and
/// combine all-to-alls with their count exchange, and the expert MLPs (GEMMs, SwiGLU and
/// the ETP all-reduce of their output).
struct MoePhaseTimes {
  double dispatch_combine_s = 0;
  double experts_s = 0;
};

class MoeLayer {
 public:
  /// This rank's shards of `full` in `dtype` on `backend` (its allocator counts every
  /// byte); `ep` and `etp` are the rank's EP and ETP groups (sizes config.ep and
  /// config.etp, communicators of that backend); all outlive the layer.
  template <typename T>
  static absl::StatusOr<std::unique_ptr<MoeLayer>> Create(const MoeLayerConfig& config,
                                                          const MoeWeights<T>& full,
                                                          Communicator* ep, Communicator* etp,
                                                          Backend* backend, DType dtype);

  /// The same layer with the weights MoeWeights<T>::Random(config, seed, scale) holds,
  /// without making the full weights: each rank generates only its shards.
  static absl::StatusOr<std::unique_ptr<MoeLayer>> CreateRandom(const MoeLayerConfig& config,
                                                                uint64_t seed, double scale,
                                                                Communicator* ep, Communicator* etp,
                                                                Backend* backend, DType dtype);

  /// y[tokens, h] from x[tokens, h] (the backend's memory, the layer's dtype). Balanced
  /// routing numbers the tokens of EP rank r from r·tokens (every EP rank passes the same
  /// count). Forwards and backwards come in pairs (one forward's activations are stored
  /// at a time; TakeSaved / RestoreSaved keep more).
  absl::Status Forward(const void* x, int64_t tokens, void* y);
  /// dx (overwritten) from dy, for the loss Σ y·(its gradient) + aux_loss(); weight
  /// gradients accumulate (+=), as over micro-batches. Frees the stored activations.
  absl::Status Backward(const void* dy, void* dx);

  /// Moves the last Forward's stored state out (the layer then holds none) / back in
  /// before its Backward. Every rank of the EP group must restore the same micro-batch.
  MoeSaved TakeSaved();
  void RestoreSaved(MoeSaved saved);
  /// The router and the shared experts (reduced over data parallelism like dense weights),
  /// or the routed experts (reduced over the expert-data-parallel group), as value and
  /// gradient slots; an owner may rebind them to views of the same shapes.
  std::vector<ParameterRef> ParameterRefs(bool routed_experts);

  /// The auxiliary loss of the last forward (the same on every rank; 0 without a coeff).
  double aux_loss() const { return aux_loss_; }
  /// Assignments of this rank's tokens per global expert in the last forward (after drops).
  const std::vector<int64_t>& tokens_per_expert() const { return tokens_per_expert_; }
  /// Time breakdown of the last Forward and the last Backward.
  const MoePhaseTimes& forward_times() const { return forward_times_; }
  const MoePhaseTimes& backward_times() const { return backward_times_; }
  /// Rows each local expert computed in the last forward.
  const std::vector<int64_t>& local_tokens_per_expert() const {
    return dispatcher_.local_tokens_per_expert();
  }

  using Params = MoeParams;
  /// An expert MLP run outside the layer: rows [rows, h] of local expert `expert` (or of
  /// the shared experts when expert is -1) to its output [rows, h], fp32 host memory.
  using ExpertMlp =
      std::function<absl::Status(int64_t expert, const float* in, int64_t rows, float* out)>;
  /// With config.external_expert_mlps (fp32 on the cpu backend): the routed and shared
  /// experts' MLPs Forward runs (weight-only quantized experts); must be set before it.
  absl::Status SetExpertMlps(ExpertMlp mlp);

  const Params& weights() const { return w_; }
  const Params& grads() const { return g_; }
  const MoeLayerConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }

 private:
  // Writes n elements of full weight tensor `tensor` (1 router, 2 fc1, 3 fc2, 4 shared_fc1,
  // 5 shared_fc2) from flat offset `offset` into out.
  using WeightSource = std::function<void(int tensor, int64_t offset, int64_t n, double* out)>;
  static absl::StatusOr<std::unique_ptr<MoeLayer>> CreateFrom(const MoeLayerConfig& config,
                                                              const WeightSource& source,
                                                              Communicator* ep, Communicator* etp,
                                                              Backend* backend, DType dtype);
  MoeLayer(const MoeLayerConfig& config, Communicator* ep, Communicator* etp, Backend* backend,
           DType dtype);
  absl::StatusOr<Tensor> Alloc(std::vector<int64_t> shape, MemoryTag tag) const;
  absl::StatusOr<Tensor> AllocRouter(std::vector<int64_t> shape, MemoryTag tag) const;
  // y[n, out] = x[n, in]·W[out, in]ᵀ (+= when accumulate).
  absl::Status Linear(void* y, const void* x, const void* w, int64_t n, int64_t in, int64_t out,
                      bool accumulate);
  // dx[n, in] (= or +=) dy[n, out]·W; dW[out, in] += dyᵀ·x.
  absl::Status LinearBackward(void* dx, void* dw, const void* dy, const void* x, const void* w,
                              int64_t n, int64_t in, int64_t out, bool accumulate_dx);
  // A collective on a few host values, through the backend's memory where the
  // communicators need it (NCCL).
  absl::Status HostAllReduce(Communicator* group, std::vector<double>& values);
  // The probabilities in the rows' dtype (probs_ itself when the router's dtype is theirs).
  absl::StatusOr<Tensor> RowProbs() const;
  absl::Status SharedForward(const void* x, int64_t tokens, void* y);
  absl::Status SharedBackward(const void* dy, void* dx);
  // expert_fc1_ and expert_act_ are allocated by the caller.
  absl::Status ExpertsForward(const void* in, void* out);
  absl::Status ExpertsBackward(const void* dout, void* din, void* dact, void* dfc1);
  // The routing's bookkeeping on the host: counts per expert and the permutation (perm_),
  // from selected_ (and probs_ for capacity routing).
  absl::Status Permutation(int64_t tokens);
  // Auxiliary loss of the EP group's tokens (cpu backend); fills global_counts_.
  absl::Status AuxLoss(int64_t tokens);
  // Every rank of the layer's EP × ETP grid learns whether any rank failed to allocate
  // the buffers whose sizes its routing decides, so that an out-of-memory rank does not
  // leave its peers waiting in the next all-to-all: the failed rank returns its status,
  // the others Aborted.
  absl::Status AgreeOnAllocation(const absl::Status& mine);

  MoeLayerConfig config_;
  Communicator* ep_;
  Communicator* etp_;
  Backend* be_;
  DType dtype_;  // rows, weights, gradients
  DType rdt_;    // router: fp32 (fp64 for an fp64 layer)
  Tensor scratch_;  // device backends: 2·E fp64 values for host collectives
  Params w_, g_;
  ExpertMlp expert_mlp_;  // SetExpertMlps (config_.external_expert_mlps)
  AllToAllTokenDispatcher dispatcher_;

  // Stored by Forward for Backward.
  int64_t tokens_ = 0;
  int64_t routed_rows_ = 0;  // permuted rows: T·k less the dropped assignments
  double aux_loss_ = 0;
  std::vector<int64_t> tokens_per_expert_;
  std::vector<double> global_counts_;
  MoePhaseTimes forward_times_, backward_times_;
  Tensor x_, scores_, selected_, probs_, perm_;  // perm_[i] = t·k + j of permuted row i
  Tensor expert_in_, expert_fc1_, expert_act_;   // expert-major rows of local experts
  Tensor combined_;                              // expert outputs back in permuted order
  Tensor shared_fc1_, shared_act_;
};

}  // namespace paratune::kernels

#endif  // PARATUNE_KERNELS_MOE_LAYER_H_
