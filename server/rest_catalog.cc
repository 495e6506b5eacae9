#include "server/rest_catalog.h"

#include <google/protobuf/util/json_util.h>

#include <nlohmann/json.hpp>

#include "paratune/v1/spec.pb.h"
#include "search/device_catalog.h"
#include "search/framework_profile.h"
#include "search/presets.h"
#include "search/spec_io.h"
#include "server/rest_common.h"

namespace paratune::server {
namespace {

using nlohmann::json;

// A preset's architecture in the wire form: the canonical writer's model section
// (spec_io.h), read into v1::ModelSpec and printed as every REST answer is.
json PresetModel(const ModelSpec& model) {
  JobSpec spec;
  spec.model = model;
  v1::ModelSpec wire;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  if (!google::protobuf::util::JsonStringToMessage(JobSpecToJson(spec).at("model").dump(), &wire,
                                                   options)
           .ok()) {
    return json::object();  // unreachable: the canonical model section is a ModelSpec
  }
  return json::parse(ToJson(wire));
}

json DeviceJson(const DeviceProfile& d) {
  return json{{"name", d.name},
              {"peak_fp32_tflops", d.peak_fp32_tflops},
              {"peak_tf32_tflops", d.peak_tf32_tflops},
              {"peak_bf16_tflops", d.peak_bf16_tflops},
              {"peak_fp8_tflops", d.peak_fp8_tflops},
              {"peak_fp4_tflops", d.peak_fp4_tflops},
              {"block_scaled_formats", d.block_scaled_formats},
              {"nvlink_domain", d.nvlink_domain},
              {"memory_bytes", d.memory_bytes},
              {"memory_bandwidth", d.memory_bandwidth},
              {"nvlink_bandwidth", d.nvlink_bandwidth},
              {"network_bandwidth", d.network_bandwidth},
              {"nvlink_latency_s", d.nvlink_latency_s},
              {"network_latency_s", d.network_latency_s},
              {"kernel_launch_s", d.kernel_launch_s},
              {"num_sms", d.num_sms},
              {"gemm_tile_m", d.gemm_tile_m},
              {"gemm_tile_n", d.gemm_tile_n},
              {"gemm_k_overhead", d.gemm_k_overhead},
              {"gemm_efficiency", d.gemm_efficiency},
              {"fp8_gemm_efficiency", d.fp8_gemm_efficiency},
              {"attention_efficiency", d.attention_efficiency},
              {"memory_efficiency", d.memory_efficiency},
              {"comm_overlap_slowdown", d.comm_overlap_slowdown},
              {"host_memory", d.host_memory},
              {"source", d.source}};
}

std::string BuildCatalog() {
  json presets = json::array();
  for (const std::string& name : PresetNames()) {
    absl::StatusOr<ModelSpec> model = FindPreset(name);
    if (model.ok()) presets.push_back(json{{"name", name}, {"model", PresetModel(*model)}});
  }
  json devices = json::array();
  for (const std::string& name : DeviceNames()) {
    absl::StatusOr<DeviceProfile> device = FindDevice(name);
    if (device.ok()) devices.push_back(DeviceJson(*device));
  }
  json precisions = json::array();
  for (Precision p : {Precision::kBf16, Precision::kFp16, Precision::kFp8, Precision::kMxfp8,
                      Precision::kNvfp4, Precision::kFp32}) {
    precisions.push_back(ToString(p));
  }
  json frameworks = json::array();
  for (Framework f : AllFrameworks()) {
    const char* format = ProfileOf(f).export_format;
    frameworks.push_back(
        json{{"name", ToString(f)}, {"export_format", format != nullptr ? format : ""}});
  }
  return json{{"presets", presets},
              {"devices", devices},
              {"precisions", precisions},
              {"frameworks", frameworks}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

const std::string& CatalogJson() {
  static const std::string* const kCatalog = new std::string(BuildCatalog());
  return *kCatalog;
}

}  // namespace paratune::server
