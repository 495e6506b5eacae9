#include "inference/serving_result.h"

#include "absl/strings/str_cat.h"

namespace paratune::inference {

int64_t ServingConfig::num_gpus() const {
  const int64_t instances = disaggregated ? prefill_replicas + decode_replicas : replicas;
  return gpus_per_instance() * instances;
}

std::string ServingConfig::ToString() const {
  std::string s = absl::StrCat("tp", tp, " pp", pp);
  if (ep > 1) absl::StrAppend(&s, " ep", ep);
  if (attention_dp) absl::StrAppend(&s, " adp");
  if (disaggregated) {
    absl::StrAppend(&s, " P", prefill_replicas, ":D", decode_replicas);
  } else {
    absl::StrAppend(&s, " x", replicas);
  }
  absl::StrAppend(&s, " mbs", max_batch_size, " mnt", max_num_tokens,
                  " w:", std::string(inference::ToString(weight_precision)),
                  " kv:", std::string(inference::ToString(kv_cache_precision)));
  return s;
}

}  // namespace paratune::inference
