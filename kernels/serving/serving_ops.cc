#include "kernels/serving/serving_ops.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/serving/rope.h"

namespace paratune::kernels::serving {
namespace {

// The host kernels; every pointer is host memory.
class CpuServingOps : public ServingOps {
 public:
  explicit CpuServingOps(int threads) : threads_(threads) {}

  absl::Status BeginStep(const PagedKvCache&, const std::vector<SeqChunk>& chunks) override {
    chunks_ = chunks;
    positions_.clear();
    for (const SeqChunk& c : chunks) {
      for (int64_t i = 0; i < c.num_tokens; ++i) positions_.push_back(c.start + i);
    }
    return absl::OkStatus();
  }

  absl::Status Rope(float* x, int64_t ld, int64_t heads, int64_t d, double theta) override {
    ApplyRope(x, ld, static_cast<int64_t>(positions_.size()), positions_.data(), heads, d, theta);
    return absl::OkStatus();
  }

  absl::Status WriteKv(PagedKvCache& cache, int64_t layer, const float* k, const float* v,
                       int64_t ld) override {
    int64_t row = 0;
    for (const SeqChunk& c : chunks_) {
      for (int64_t i = 0; i < c.num_tokens; ++i, ++row) {
        if (!cache.Holds(layer, c.seq, c.start + i)) continue;  // left of a window
        cache.Write(layer, c.seq, c.start + i, k + row * ld, v + row * ld);
      }
    }
    return absl::OkStatus();
  }

  absl::Status PagedAttention(const PagedAttentionArgs& args, const PagedKvCache& cache,
                              int64_t layer) override {
    PagedAttentionForward(args, cache, layer, chunks_, threads_);
    return absl::OkStatus();
  }

  absl::Status ArgMax(DType dtype, const void* logits, int64_t rows, int64_t v,
                      std::vector<double>* value, std::vector<int64_t>* index) override {
    if (dtype != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrCat("argmax: logits dtype ", DTypeName(dtype), " must be fp32 on the CPU"));
    }
    value->resize(rows);
    index->resize(rows);
    for (int64_t r = 0; r < rows; ++r) {
      const float* lr = static_cast<const float*>(logits) + r * v;
      int64_t best = 0;
      for (int64_t j = 1; j < v; ++j) {
        if (lr[j] > lr[best]) best = j;
      }
      (*value)[r] = lr[best];
      (*index)[r] = best;
    }
    return absl::OkStatus();
  }

 private:
  int threads_ = 1;
  std::vector<SeqChunk> chunks_;
  std::vector<int64_t> positions_;
};

}  // namespace

StepArrays BuildStepArrays(const PagedKvCache& cache, const std::vector<SeqChunk>& chunks,
                           int64_t flash_min_tokens) {
  StepArrays a;
  const int64_t bs = cache.shape().block_size;
  int64_t row = 0;
  for (const SeqChunk& c : chunks) {
    for (int64_t i = 0; i < c.num_tokens; ++i) a.positions.push_back(c.start + i);
    a.start.push_back(c.start);
    a.row0.push_back(row);
    a.tokens.push_back(c.num_tokens);
    const bool flash = c.start == 0 && c.num_tokens >= flash_min_tokens;
    if (flash) a.flash.push_back({row, c.num_tokens});
    a.paged_tokens.push_back(flash ? 0 : c.num_tokens);
    if (!flash) a.paged_max_tokens = std::max(a.paged_max_tokens, c.num_tokens);
    a.max_chunk_tokens = std::max(a.max_chunk_tokens, c.num_tokens);
    row += c.num_tokens;
  }
  // Per group: a layer that reads it, its slot mapping and block tables.
  const int64_t groups = cache.num_groups();
  std::vector<int64_t> layer_of(groups, -1);
  for (int64_t l = 0; l < cache.shape().num_layers; ++l) {
    if (layer_of[cache.group_of(l)] < 0) layer_of[cache.group_of(l)] = l;
  }
  a.groups.resize(groups);
  const int64_t n = static_cast<int64_t>(chunks.size());
  for (int64_t g = 0; g < groups; ++g) {
    if (layer_of[g] < 0) continue;
    StepArrays::Group& out = a.groups[g];
    out.used = true;
    for (const SeqChunk& c : chunks) {
      const std::vector<int32_t>& t = cache.block_table(c.seq, layer_of[g]);
      out.max_blocks = std::max<int64_t>(out.max_blocks, static_cast<int64_t>(t.size()));
      for (int64_t pos = c.start; pos < c.start + c.num_tokens; ++pos) {
        const int64_t b = pos / bs;
        const bool held = b < static_cast<int64_t>(t.size()) && t[b] >= 0;
        out.slots.push_back(held ? static_cast<int64_t>(t[b]) * bs + pos % bs : -1);
      }
    }
    out.tables.assign(n * out.max_blocks, -1);
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<int32_t>& t = cache.block_table(chunks[i].seq, layer_of[g]);
      std::copy(t.begin(), t.end(), out.tables.begin() + i * out.max_blocks);
    }
  }
  return a;
}

absl::StatusOr<std::unique_ptr<ServingOps>> MakeServingOps(Backend& backend, int threads) {
  if (backend.kind() == BackendKind::kCpu) {
    return std::unique_ptr<ServingOps>(new CpuServingOps(threads));
  }
#if PARATUNE_HAVE_CUDA
  return MakeCudaServingOps(backend);
#else
  return absl::UnimplementedError("the serving kernels' CUDA twins are not built in this binary");
#endif
}

}  // namespace paratune::kernels::serving
