// ServingOps on the CUDA backend: the device twins of the host kernels, on the backend's
// stream. BeginStep builds the step's positions, chunk table, and per block-table group
// the slot mapping and block tables on the host and copies them to the device once. A
// whole prompt (a chunk at start 0 of at least kFlashMinTokens tokens) attends to its own
// K and V with the backend's flash attention (blocks of query rows through cuBLAS, in the
// layer's dtype); the other chunks (decodes, later prompt chunks) go through the paged
// kernel.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/serving/cuda/paged_attention_launcher.h"
#include "kernels/serving/serving_ops.h"
#include "kernels/status_macros.h"

namespace paratune::kernels::serving {
namespace {

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// Prompt tokens from which a chunk at start 0 runs flash attention rather than the paged
// kernel (one thread block per token and head, which rereads the keys for every query).
constexpr int64_t kFlashMinTokens = 64;

absl::StatusOr<cuda::KvStorage> StorageOf(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return cuda::KvStorage::kF32;
    case DType::kBF16:
      return cuda::KvStorage::kBF16;
    case DType::kF16:
      return cuda::KvStorage::kF16;
    case DType::kFp8E4M3:
      return cuda::KvStorage::kFp8E4M3;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("kv dtype ", DTypeName(dtype), " has no device storage"));
  }
}

class CudaServingOps : public ServingOps {
 public:
  explicit CudaServingOps(CudaBackendBase& backend) : be_(backend) {}

  absl::Status BeginStep(const PagedKvCache& cache, const std::vector<SeqChunk>& chunks) override {
    const StepArrays a = BuildStepArrays(cache, chunks, kFlashMinTokens);
    tokens_ = static_cast<int64_t>(a.positions.size());
    num_chunks_ = static_cast<int64_t>(chunks.size());
    max_chunk_tokens_ = a.max_chunk_tokens;
    paged_max_tokens_ = a.paged_max_tokens;
    flash_ = a.flash;
    PT_ASSIGN_OR_RETURN(positions_, Upload(a.positions));
    PT_ASSIGN_OR_RETURN(chunk_start_, Upload(a.start));
    PT_ASSIGN_OR_RETURN(chunk_row0_, Upload(a.row0));
    PT_ASSIGN_OR_RETURN(chunk_tokens_, Upload(a.tokens));
    PT_ASSIGN_OR_RETURN(paged_chunk_tokens_, Upload(a.paged_tokens));
    const size_t groups = a.groups.size();
    slots_.assign(groups, Tensor());
    tables_.assign(groups, Tensor());
    max_blocks_.assign(groups, 1);
    for (size_t g = 0; g < groups; ++g) {
      if (!a.groups[g].used) continue;
      PT_ASSIGN_OR_RETURN(slots_[g], Upload(a.groups[g].slots));
      PT_ASSIGN_OR_RETURN(tables_[g], Upload(a.groups[g].tables));
      max_blocks_[g] = a.groups[g].max_blocks;
    }
    return absl::OkStatus();
  }

  absl::Status Rope(float* x, int64_t ld, int64_t heads, int64_t d, double theta) override {
    return CudaStatus(cuda::rope_forward(x, ld, tokens_, positions_.data_as<int64_t>(), heads, d,
                                         theta, be_.stream()),
                      "rope");
  }

  absl::Status WriteKv(PagedKvCache& cache, int64_t layer, const float* k, const float* v,
                       int64_t ld) override {
    PT_ASSIGN_OR_RETURN(const cuda::KvStorage storage, StorageOf(cache.shape().dtype));
    const int64_t row = cache.shape().groups * cache.shape().head_dim;
    return CudaStatus(cuda::kv_cache_write(cache.pool(layer).data(), storage, k, v, ld,
                                           slots_.at(cache.group_of(layer)).data_as<int64_t>(),
                                           tokens_, row, cache.shape().block_size, be_.stream()),
                      "kv cache write");
  }

  absl::Status PagedAttention(const PagedAttentionArgs& args, const PagedKvCache& cache,
                              int64_t layer) override {
    PT_ASSIGN_OR_RETURN(const cuda::KvStorage storage, StorageOf(cache.shape().dtype));
    const bool flash = args.k != nullptr && args.v != nullptr && !flash_.empty();
    if (flash) PT_RETURN_IF_ERROR(FlashPrompts(args));
    if (flash && paged_max_tokens_ == 0) return absl::OkStatus();
    const int64_t g = cache.group_of(layer);
    cuda::PagedAttentionCudaArgs a;
    a.q = args.q, a.ld_q = args.ld_q, a.o = args.o, a.ld_o = args.ld_o;
    a.kv_pool = cache.pool(layer).data();
    a.storage = storage;
    a.block_tables = tables_.at(g).data_as<int32_t>();
    a.max_blocks = max_blocks_[g];
    a.chunk_start = chunk_start_.data_as<int64_t>();
    a.chunk_row0 = chunk_row0_.data_as<int64_t>();
    a.chunk_tokens = (flash ? paged_chunk_tokens_ : chunk_tokens_).data_as<int64_t>();
    a.num_chunks = num_chunks_;
    a.max_chunk_tokens = flash ? paged_max_tokens_ : max_chunk_tokens_;
    a.heads = args.heads, a.groups = args.groups, a.head_dim = args.head_dim;
    a.block_size = cache.shape().block_size;
    a.scale = args.scale;
    a.window = args.window;
    return CudaStatus(cuda::paged_attention_forward(a, be_.stream()), "paged attention");
  }

  absl::Status ArgMax(DType dtype, const void* logits, int64_t rows, int64_t v,
                      std::vector<double>* value, std::vector<int64_t>* index) override {
    cuda::LogitsType type = cuda::LogitsType::kF32;
    switch (dtype) {
      case DType::kF32:
        type = cuda::LogitsType::kF32;
        break;
      case DType::kBF16:
        type = cuda::LogitsType::kBF16;
        break;
      case DType::kF16:
        type = cuda::LogitsType::kF16;
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("argmax: logits dtype ", DTypeName(dtype), " must be fp32/bf16/fp16"));
    }
    PT_ASSIGN_OR_RETURN(
        Tensor values, be_.Empty({std::max<int64_t>(rows, 1)}, DType::kF32, MemoryTag::kWorkspace));
    PT_ASSIGN_OR_RETURN(Tensor indices, be_.Empty({std::max<int64_t>(rows, 1) * 8}, DType::kU8,
                                                  MemoryTag::kWorkspace));
    PT_RETURN_IF_ERROR(CudaStatus(cuda::argmax_rows(logits, type, rows, v, values.data_as<float>(),
                                                    indices.data_as<int64_t>(), be_.stream()),
                                  "argmax"));
    std::vector<float> host_values(rows);
    index->resize(rows);
    PT_RETURN_IF_ERROR(be_.CopyBytes(host_values.data(), values.data(), rows * 4,
                                     Backend::CopyKind::kBackendToHost));
    PT_RETURN_IF_ERROR(
        be_.CopyBytes(index->data(), indices.data(), rows * 8, Backend::CopyKind::kBackendToHost));
    value->assign(host_values.begin(), host_values.end());
    return absl::OkStatus();
  }

 private:
  // The whole prompts of the step through the backend's flash attention, each attending
  // to its own K and V (args.qkv); the output rows as fp32 into args.o.
  // In `flash_dtype`: a 16-bit run converts the prompt's rows of Q, K and V first (K and V
  // lie in Q's rows, so the rows convert as one block).
  absl::Status FlashPrompts(const PagedAttentionArgs& args) {
    const DType dt = args.flash_dtype;
    const int64_t es = SizeOf(dt), d = args.head_dim, width = args.heads * d;
    const int64_t k_at = args.k - args.q, v_at = args.v - args.q;
    if (k_at < width || v_at < k_at || v_at + args.groups * d > args.ld_q) {
      return absl::InvalidArgumentError("flash prompts: K and V must follow Q in its rows");
    }
    if (dt != DType::kF32 && args.ld_o != width) {
      return absl::InvalidArgumentError("flash prompts: a 16-bit output needs ld_o = heads x d");
    }
    for (const auto& [row0, tokens] : flash_) {
      AttentionArgs fa;
      fa.batch = 1, fa.seq = tokens;
      fa.heads = args.heads, fa.groups = args.groups, fa.head_dim = d;
      const float* rows = args.q + row0 * args.ld_q;
      Tensor qkv;
      const char* base = reinterpret_cast<const char*>(rows);
      if (dt != DType::kF32) {
        PT_ASSIGN_OR_RETURN(qkv, be_.Empty({tokens, args.ld_q}, dt, MemoryTag::kWorkspace));
        PT_RETURN_IF_ERROR(be_.Cast(dt, qkv.data(), DType::kF32, rows, tokens * args.ld_q));
        base = static_cast<const char*>(qkv.data());
      }
      fa.q = base;
      fa.k = base + k_at * es;
      fa.v = base + v_at * es;
      fa.ld_qkv = args.ld_q;
      fa.scale = args.scale;
      fa.window = args.window;
      float* out = args.o + row0 * args.ld_o;
      Tensor staged;
      if (dt == DType::kF32) {
        fa.o = out, fa.ld_o = args.ld_o;
      } else {
        PT_ASSIGN_OR_RETURN(staged, be_.Empty({tokens, width}, dt, MemoryTag::kWorkspace));
        fa.o = staged.data(), fa.ld_o = width;
      }
      PT_ASSIGN_OR_RETURN(Tensor lse,
                          be_.Empty({args.heads * tokens}, DType::kF32, MemoryTag::kWorkspace));
      PT_RETURN_IF_ERROR(be_.FlashAttentionForward(dt, fa, lse.data_as<float>()));
      if (dt != DType::kF32) {
        PT_RETURN_IF_ERROR(be_.Cast(DType::kF32, out, dt, staged.data(), tokens * width));
      }
    }
    return absl::OkStatus();
  }

  // A device copy of `host` (bytes, tag kWorkspace); one element at least.
  template <typename T>
  absl::StatusOr<Tensor> Upload(const std::vector<T>& host) {
    const int64_t bytes = static_cast<int64_t>(std::max<size_t>(host.size(), 1) * sizeof(T));
    PT_ASSIGN_OR_RETURN(Tensor t, be_.Empty({bytes}, DType::kU8, MemoryTag::kWorkspace));
    PT_RETURN_IF_ERROR(be_.CopyBytes(t.data(), host.data(),
                                     static_cast<int64_t>(host.size() * sizeof(T)),
                                     Backend::CopyKind::kHostToBackend));
    return t;
  }

  CudaBackendBase& be_;
  int64_t tokens_ = 0, num_chunks_ = 0, max_chunk_tokens_ = 0;
  int64_t paged_max_tokens_ = 0;   ///< Over the chunks the paged kernel runs.
  std::vector<std::pair<int64_t, int64_t>> flash_;  ///< The step's whole prompts (row, tokens).
  Tensor positions_, chunk_start_, chunk_row0_, chunk_tokens_;
  Tensor paged_chunk_tokens_;           ///< chunk_tokens_ with the whole prompts at 0.
  std::vector<Tensor> slots_, tables_;  ///< Per block-table group.
  std::vector<int64_t> max_blocks_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServingOps>> MakeCudaServingOps(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackendBase*>(&backend);
  if (cuda == nullptr) {
    return absl::InvalidArgumentError("the CUDA serving operations need a CUDA backend");
  }
  return std::unique_ptr<ServingOps>(new CudaServingOps(*cuda));
}

}  // namespace paratune::kernels::serving
