// Reading the published reference data (calibration_runs.json, sweeps.json) into JobSpecs
// and ParallelConfigs, shared by the model benchmarks.
#ifndef PARATUNE_BENCH_MODEL_RECORDS_H_
#define PARATUNE_BENCH_MODEL_RECORDS_H_

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "search/parallel_config.h"
#include "search/specs.h"

namespace paratune::bench {

/// A record's field: the string (empty when absent or not a string), the number
/// (`fallback` when absent or not a number), and whether it is given (present, not null).
std::string Str(const nlohmann::json& r, const char* key);
int64_t Int(const nlohmann::json& r, const char* key, int64_t fallback);
bool Stated(const nlohmann::json& r, const char* key);

/// The median of `v` (the mean of the two middle values for an even count; 0 when empty).
double Median(std::vector<double> v);

/// --data DIR if given, else $PARATUNE_SOURCE_DIR/../shared/data, else the directory
/// compiled in (the checkout's ../shared/data).
std::string DataDir(int argc, char** argv);
bool HasFlag(int argc, char** argv, const char* flag);
/// The published tables the benchmarks carry themselves (bench/model/data: figures copied
/// from public documentation, with their source): $PARATUNE_SOURCE_DIR/bench/model/data,
/// else the directory compiled in.
std::string BenchDataDir();
absl::StatusOr<nlohmann::json> ReadJson(const std::string& path);

/// What a record states; unstated knobs are std::nullopt (the planner chooses them).
struct RecordLayout {
  ParallelConfig config;  ///< Stated fields filled; the rest defaults.
  bool micro_batch_stated = true, vp_stated = true, sp_stated = true, recompute_stated = true,
       cp_stated = true, dopt_stated = true;
};

/// The JobSpec of a calibration or sweep record (model shape, training, cluster).
JobSpec SpecFromRecord(const nlohmann::json& r);
RecordLayout LayoutFromRecord(const nlohmann::json& r);

/// NeMo AutoModel's runs (a record whose `framework` names AutoModel) have
/// training.framework nemo-automodel. With Transformer Engine's kernels (`other_measured.
/// kernel_optimizations` names TE) they run TE's attention, which is cuDNN's on Hopper;
/// the others run the Hugging Face models' FlashAttention-2 (torchtitan's kernel on the
/// device). Returns whether the record is AutoModel's (`spec` unchanged otherwise).
bool ReadAsAutoModel(const nlohmann::json& r, JobSpec* spec);

/// Pins the stated knobs of `layout` in spec.search (so Plan() chooses only the others).
void PinStated(const RecordLayout& layout, JobSpec* spec);

}  // namespace paratune::bench

#endif  // PARATUNE_BENCH_MODEL_RECORDS_H_
