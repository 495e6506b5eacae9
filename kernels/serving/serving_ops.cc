#include "kernels/serving/serving_ops.h"

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
