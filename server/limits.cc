// The API's bounds (see limits.h).
#include "server/limits.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace paratune::server {
namespace {

absl::Status TooLong(absl::string_view field, size_t size, size_t limit) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, " is ", size, " bytes; the limit is ", limit, " bytes"));
}

absl::Status CheckBytes(absl::string_view field, const std::string& value, size_t limit) {
  return value.size() > limit ? TooLong(field, value.size(), limit) : absl::OkStatus();
}

template <typename List>
absl::Status CheckEntries(absl::string_view field, const List& list, size_t limit) {
  if (static_cast<size_t>(list.size()) <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " has ", list.size(), " entries; the limit is ", limit));
}

}  // namespace

absl::Status ValidateJobSpecBounds(const v1::JobSpec& spec) {
  const std::pair<absl::string_view, const std::string*> names[] = {
      {"name", &spec.name()}, {"model.name", &spec.model().name()}};
  for (const auto& [field, value] : names) {
    if (auto s = CheckBytes(field, *value, kMaxSpecNameBytes); !s.ok()) return s;
  }
  if (auto s =
          CheckBytes("model.hf_config_json", spec.model().hf_config_json(), kMaxHfConfigJsonBytes);
      !s.ok()) {
    return s;
  }
  const std::pair<absl::string_view, const std::string*> keywords[] = {
      {"model.preset", &spec.model().preset()},
      {"model.activation", &spec.model().activation()},
      {"model.normalization", &spec.model().normalization()},
      {"model.position_embedding", &spec.model().position_embedding()},
      {"training.precision", &spec.training().precision()},
      {"training.optimizer", &spec.training().optimizer()},
      {"training.framework", &spec.training().framework()},
      {"cluster.gpu", &spec.cluster().gpu()},
      {"search.objective", &spec.search().objective()},
      {"search.mode", &spec.search().mode()},
      {"kind", &spec.kind()},
      {"serving.engine", &spec.serving().engine()},
      {"serving.batching", &spec.serving().batching()}};
  for (const auto& [field, value] : keywords) {
    if (auto s = CheckBytes(field, *value, kMaxSpecKeywordBytes); !s.ok()) return s;
  }
  const v1::SearchSpec& search = spec.search();
  const std::pair<absl::string_view, int> lists[] = {
      {"search.tp", search.tp_size()},
      {"search.pp", search.pp_size()},
      {"search.dp", search.dp_size()},
      {"search.cp", search.cp_size()},
      {"search.vp", search.vp_size()},
      {"search.micro_batch_size", search.micro_batch_size_size()},
      {"search.sequence_parallel", search.sequence_parallel_size()},
      {"search.tp_comm_overlap", search.tp_comm_overlap_size()},
      {"search.overlap_grad_reduce", search.overlap_grad_reduce_size()},
      {"search.overlap_p2p_comm", search.overlap_p2p_comm_size()},
      {"search.overlap_param_gather", search.overlap_param_gather_size()},
      {"search.recompute", search.recompute_size()},
      {"search.recompute_num_layers", search.recompute_num_layers_size()},
      {"search.distributed_optimizer", search.distributed_optimizer_size()},
      {"search.data_parallel_sharding", search.data_parallel_sharding_size()},
      {"search.replicas", search.replicas_size()},
      {"search.max_batch_size", search.max_batch_size_size()},
      {"search.max_num_tokens", search.max_num_tokens_size()},
      {"search.weight_precision", search.weight_precision_size()},
      {"search.kv_cache_precision", search.kv_cache_precision_size()},
      {"search.disaggregated", search.disaggregated_size()},
      {"search.attention_dp", search.attention_dp_size()},
      {"search.prefill_replicas", search.prefill_replicas_size()},
      {"search.decode_replicas", search.decode_replicas_size()}};
  for (const auto& [field, entries] : lists) {
    if (static_cast<size_t>(entries) > kMaxSearchListEntries) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " has ", entries, " entries; the limit is ", kMaxSearchListEntries));
    }
  }
  for (int i = 0; i < search.recompute_size(); ++i) {
    if (auto s = CheckBytes(absl::StrCat("search.recompute[", i, "]"), search.recompute(i),
                            kMaxSpecKeywordBytes);
        !s.ok()) {
      return s;
    }
  }
  const std::pair<absl::string_view, const google::protobuf::RepeatedPtrField<std::string>*>
      keyword_lists[] = {{"search.weight_precision", &search.weight_precision()},
                         {"search.kv_cache_precision", &search.kv_cache_precision()}};
  for (const auto& [field, list] : keyword_lists) {
    for (int i = 0; i < list->size(); ++i) {
      if (auto s = CheckBytes(absl::StrCat(field, "[", i, "]"), list->Get(i), kMaxSpecKeywordBytes);
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateSubmitJobRequest(const v1::SubmitJobRequest& request) {
  return ValidateJobSpecBounds(request.spec());
}

absl::Status ValidateId(absl::string_view field, absl::string_view id) {
  if (id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is empty; a job id is required"));
  }
  if (id.size() > kMaxIdBytes) return TooLong(field, id.size(), kMaxIdBytes);
  return absl::OkStatus();
}

absl::Status ValidateListJobsRequest(const v1::ListJobsRequest& request) {
  if (request.page_size() < 0 || request.page_size() > kMaxListJobsPageSize) {
    return absl::InvalidArgumentError(absl::StrCat("page_size (", request.page_size(),
                                                   ") must be between 0 and ", kMaxListJobsPageSize,
                                                   " (0 = 100)"));
  }
  if (auto s = CheckBytes("page_token", request.page_token(), kMaxIdBytes); !s.ok()) return s;
  if (!v1::JobState_IsValid(request.state())) {
    return absl::InvalidArgumentError(
        absl::StrCat("state (", static_cast<int>(request.state()),
                     ") is not a JobState (0 = all, 1 = PENDING ... 8 = CANCELLED)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRegisterRequest(const v1::RegisterRequest& request) {
  const v1::WorkerInfo& w = request.worker();
  if (auto s = CheckBytes("worker.id", w.id(), kMaxIdBytes); !s.ok()) return s;
  if (auto s = CheckBytes("worker.name", w.name(), kMaxSpecNameBytes); !s.ok()) return s;
  if (auto s = CheckBytes("worker.backend", w.backend(), kMaxSpecKeywordBytes); !s.ok()) {
    return s;
  }
  if (auto s = CheckBytes("worker.device_kind", w.device_kind(), kMaxSpecKeywordBytes); !s.ok()) {
    return s;
  }
  if (auto s = CheckBytes("worker.state", w.state(), kMaxSpecKeywordBytes); !s.ok()) return s;
  if (auto s = CheckBytes("worker.current_task_id", w.current_task_id(), kMaxIdBytes); !s.ok()) {
    return s;
  }
  if (auto s = CheckEntries("worker.devices", w.devices(), kMaxDevicesPerWorker); !s.ok()) {
    return s;
  }
  for (int i = 0; i < w.devices_size(); ++i) {
    const v1::Device& d = w.devices(i);
    if (auto s =
            CheckBytes(absl::StrCat("worker.devices[", i, "].name"), d.name(), kMaxSpecNameBytes);
        !s.ok()) {
      return s;
    }
    if (auto s = CheckEntries(absl::StrCat("worker.devices[", i, "].nvlink_peers"),
                              d.nvlink_peers(), kMaxDevicesPerWorker);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateHeartbeatRequest(const v1::HeartbeatRequest& request) {
  if (auto s = CheckBytes("worker_id", request.worker_id(), kMaxIdBytes); !s.ok()) return s;
  if (auto s = CheckEntries("task_ids", request.task_ids(), kMaxDevicesPerWorker); !s.ok()) {
    return s;
  }
  for (int i = 0; i < request.task_ids_size(); ++i) {
    if (auto s = CheckBytes(absl::StrCat("task_ids[", i, "]"), request.task_ids(i), kMaxIdBytes);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateReportResultRequest(const v1::ReportResultRequest& request) {
  if (auto s = CheckBytes("worker_id", request.worker_id(), kMaxIdBytes); !s.ok()) return s;
  const v1::TaskResult& r = request.result();
  if (auto s = CheckBytes("result.task_id", r.task_id(), kMaxIdBytes); !s.ok()) return s;
  if (auto s = CheckBytes("result.worker_id", r.worker_id(), kMaxIdBytes); !s.ok()) return s;
  if (auto s = CheckBytes("result.message", r.message(), kMaxTaskMessageBytes); !s.ok()) {
    return s;
  }
  const std::pair<absl::string_view, int> lists[] = {
      {"result.layer.phases", r.layer().phases_size()},
      {"result.layer.peak_bytes_per_rank", r.layer().peak_bytes_per_rank_size()},
      {"result.comm.samples", r.comm().samples_size()},
      {"result.verify.step_seconds", r.verify().step_seconds_size()},
      {"result.verify.peak_bytes_per_rank", r.verify().peak_bytes_per_rank_size()},
      {"result.verify.losses", r.verify().losses_size()}};
  for (const auto& [field, entries] : lists) {
    if (static_cast<size_t>(entries) > kMaxTaskResultEntries) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " has ", entries, " entries; the limit is ", kMaxTaskResultEntries));
    }
  }
  for (int i = 0; i < r.layer().phases_size(); ++i) {
    if (auto s = CheckBytes(absl::StrCat("result.layer.phases[", i, "].phase"),
                            r.layer().phases(i).phase(), kMaxSpecKeywordBytes);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace paratune::server
