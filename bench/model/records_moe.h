// The mixture-of-experts records of moe_fsdp_calibration.json as JobSpecs with their
// published layouts (model_accuracy's MoE section). Records the model cannot express are
// returned with the reason instead.
#ifndef PARATUNE_BENCH_MODEL_RECORDS_MOE_H_
#define PARATUNE_BENCH_MODEL_RECORDS_MOE_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "search/parallel_config.h"
#include "search/specs.h"

namespace paratune::bench {

struct MoeRecord {
  std::string id;
  JobSpec spec;           ///< Model from the record (and its preset for unstated fields).
  ParallelConfig config;  ///< The stated layout.
  /// spec.search pins every stated knob; unstated ones (micro-batch, vp, recompute) are
  /// left to the planner.
  bool all_stated = true;
  double published_tokens_per_gpu = 0;  ///< Published, or from the step time or TFLOP/s.
  std::string skip_reason;              ///< Non-empty: not expressible.
  /// Non-empty: the record belongs to a study whose source says only this knob varies
  /// between its rows (its notes: "only recompute_modules varies between rows"), a short
  /// run meant for comparing the rows with each other; it is scored as a ratio to the
  /// study's row without recompute, not as an absolute throughput. The study's key.
  std::string relative_study;
  bool study_control = false;  ///< The study's row without recompute (its reference).
};

/// Every record of `data` whose model_family is a mixture of experts.
std::vector<MoeRecord> MoeRecordsFromCalibration(const nlohmann::json& data);

}  // namespace paratune::bench

#endif  // PARATUNE_BENCH_MODEL_RECORDS_MOE_H_
