#include "kernels/serving/serving_layouts.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

namespace paratune::kernels::serving {

std::vector<ServingLayout> AccuracyLayouts() {
  std::vector<ServingLayout> layouts;
  for (int64_t tp : {1, 2}) {
    for (int64_t mbs : {4, 16}) {
      for (int64_t concurrency : {0, 8}) {
        ServingLayout l;
        ServeOptions& o = l.options;
        ServingConfig& m = o.model;
        m.shape.hidden_size = 256;
        m.shape.num_attention_heads = 8;
        m.shape.num_query_groups = 4;
        m.shape.ffn_hidden_size = 704;
        m.shape.vocab_size = 2048;
        m.shape.activation = Activation::kSwiglu;
        m.shape.normalization = Normalization::kRmsNorm;
        m.num_layers = 2;
        m.parallel.tp = tp;
        m.kv_block_size = 16;
        m.num_kv_blocks = 256;
        o.trace.num_requests = 24;
        o.trace.isl = 64;
        o.trace.osl = 16;
        o.trace.concurrency = concurrency;
        o.max_batch_size = mbs;
        o.max_num_tokens = 256;
        l.name = absl::StrCat("tp", tp, "-mbs", mbs, concurrency > 0 ? "-c8" : "-offline");
        layouts.push_back(l);
      }
    }
  }
  return layouts;
}

absl::StatusOr<std::vector<LayoutMeasurement>> MeasureLayouts(
    const std::vector<ServingLayout>& layouts, int rounds) {
  std::vector<LayoutMeasurement> out(layouts.size());
  for (size_t i = 0; i < layouts.size(); ++i) out[i].layout = layouts[i];
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < layouts.size(); ++i) {
      PT_ASSIGN_OR_RETURN(ServeResult res, RunServeLoop(layouts[i].options));
      LayoutMeasurement& m = out[i];
      m.tpot_p50_ms.push_back(res.tpot_s().p50 * 1e3);
      m.ttft_p50_ms.push_back(res.ttft_s().p50 * 1e3);
      m.e2e_p50_ms.push_back(res.e2e_s().p50 * 1e3);
      m.output_tokens_per_s.push_back(res.output_tokens_per_s());
      PT_ASSIGN_OR_RETURN(ServingStepResult step,
                          RunServingStep(ReferenceDecodeStep(layouts[i].options)));
      m.decode_step_ms.push_back(step.phases[0].median_s * 1e3);
      for (const RequestRecord& q : res.requests) {
        if (q.output_tokens != q.osl || q.ttft_s() > q.e2e_s()) ++m.wrong;
      }
    }
  }
  return out;
}

ServingStepConfig ReferenceDecodeStep(const ServeOptions& o) {
  ServingStepConfig ref;
  ref.model = o.model;
  ref.model.parallel.pp = 1;  // the whole model on the tp ranks: a pipeline's trip of work
  ref.model.stage = 0;
  ref.phase = ServingPhase::kDecode;
  // The batch the loop can reach: limited by clients in closed loop and by the trace.
  ref.batch = std::min(o.max_batch_size, o.trace.num_requests);
  if (o.trace.concurrency > 0) ref.batch = std::min(ref.batch, o.trace.concurrency);
  ref.context_length = o.trace.isl + o.trace.osl / 2;
  ref.logits = true;
  ref.warmup = 2;
  ref.iters = 20;
  return ref;
}

double RelativeSpread(const std::vector<double>& rounds) {
  const Distribution d = Summarize(rounds);
  return d.p50 > 0 ? (d.max - d.min) / d.p50 : 0.0;
}

}  // namespace paratune::kernels::serving
