#include "inference/attention_span.h"

#include <algorithm>

#include "search/model_math.h"

namespace paratune::inference {

AttentionSpan::AttentionSpan(const ModelSpec& model) : windowed_layers_(WindowedLayers(model)) {
  if (windowed_layers_ > 0) {
    window_ = static_cast<double>(model.sliding_window);
    full_layer_share_ =
        1.0 - static_cast<double>(windowed_layers_) / static_cast<double>(model.num_layers);
  }
}

double AttentionSpan::KvSlots(int64_t tokens, int64_t block) const {
  block = std::max<int64_t>(block, 1);
  const int64_t whole = (tokens + block - 1) / block * block;
  if (windowed_layers_ == 0) return static_cast<double>(whole);
  const int64_t window = static_cast<int64_t>(window_);
  const int64_t windowed = std::min(whole, (window + block - 1) / block * block + block);
  return full_layer_share_ * static_cast<double>(whole) +
         (1 - full_layer_share_) * static_cast<double>(windowed);
}

double AttentionSpan::AttendedContext(double context) const {
  if (windowed_layers_ == 0) return context;
  return full_layer_share_ * context + (1 - full_layer_share_) * std::min(context, window_);
}

double AttentionSpan::ChunkAttentionPairs(double before, double chunk) const {
  const double full = chunk * (before + chunk / 2);
  if (windowed_layers_ == 0) return full;
  // Query positions x in [before, before + chunk) see min(x, w) keys.
  const double end = before + chunk, w = window_;
  double windowed = 0;
  if (end <= w) {
    windowed = full;
  } else if (before >= w) {
    windowed = chunk * w;
  } else {
    windowed = (w - before) * (before + w) / 2 + (end - w) * w;
  }
  return full_layer_share_ * full + (1 - full_layer_share_) * windowed;
}

}  // namespace paratune::inference
