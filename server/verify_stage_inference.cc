// The verify stage of an inference job (see verify_stage.h): the top search.verify_top_k
// serving layouts, each run once with the serving loop on one CPU worker (a layout of R
// replicas: one replica on its 1/R share of the load; disaggregated pools of P prefill and
// D decode instances: P/g and D/g of them on a 1/g share, g = gcd(P, D)).
#include <algorithm>
#include <map>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "inference/engine_profile.h"
#include "inference/serving_profile.h"
#include "search/model_math.h"
#include "server/convert_inference.h"
#include "server/verify_stage.h"

namespace paratune::server {
namespace {

// Why the serving loop cannot run layout `c` as the spec serves it; "" when it can.
std::string ServingUnsupportedReason(const ModelSpec& m, const v1::ServingConfig& c) {
  if (std::string why = inference::ServingKernelsUnsupportedReason(m); !why.empty()) return why;
  if (c.pp() > 1 && c.disaggregated()) {
    return absl::StrCat("the serving loop does not run disaggregated pools with pp ", c.pp());
  }
  if (c.pp() > 1 && c.attention_dp()) {
    return absl::StrCat("the serving loop does not run attention data parallelism with pp ",
                        c.pp());
  }
  if (c.disaggregated() && c.attention_dp()) {
    return "the serving loop does not run disaggregated pools with attention data parallelism";
  }
  return "";
}

// The layout's instances run together (R replicas, or g = gcd(P, D) of P prefill and D
// decode instances) that one verify run stands for: it runs one of them on a 1/R share.
int64_t VerifyShare(const v1::ServingConfig& c) {
  if (c.disaggregated()) {
    return std::max<int64_t>(1, std::gcd<int64_t>(c.prefill_replicas(), c.decode_replicas()));
  }
  return std::max<int64_t>(1, c.replicas());
}

// Ranks one verify run of layout `c` takes on one worker.
int64_t VerifyRanks(const v1::ServingConfig& c) {
  if (!c.disaggregated()) return c.tp() * std::max(1, c.pp());
  const int64_t g = VerifyShare(c);
  return c.tp() * (c.prefill_replicas() / g + c.decode_replicas() / g);
}

v1::ServingVerifyTask MakeServingVerifyTask(const inference::InferenceJobSpec& spec,
                                            const v1::InferenceRankedConfig& r) {
  const ModelSpec& m = spec.model;
  const inference::ServingSpec& s = spec.serving;
  v1::ServingVerifyTask t;
  v1::LayerShape* shape = t.mutable_shape();
  shape->set_hidden_size(m.hidden_size);
  shape->set_num_attention_heads(m.num_attention_heads);
  shape->set_kv_channels(m.kv_channels);
  shape->set_num_query_groups(QueryGroups(m));
  shape->set_ffn_hidden_size(m.ffn_hidden_size);
  shape->set_vocab_size(m.vocab_size);
  shape->set_activation(ToString(m.activation));
  shape->set_normalization(ToString(m.normalization));
  t.set_num_layers(m.num_layers);
  t.set_rope(m.position_embedding == PositionEmbedding::kRope);
  t.set_attention_window(m.sliding_window);
  t.set_window_attn_skip_freq(m.window_attn_skip_freq);
  SetServingExperts(m, &t);
  if (r.config().ep() > 1) t.mutable_moe()->set_ep(r.config().ep());
  t.set_attention_dp(r.config().attention_dp());
  t.set_tp(r.config().tp());
  t.set_pp(std::max(1, r.config().pp()));
  t.set_max_batch_size(r.config().max_batch_size());
  t.set_max_num_tokens(r.config().max_num_tokens());
  t.set_weight_precision(r.config().weight_precision());
  t.set_kv_precision(r.config().kv_cache_precision());
  const int64_t block = inference::EngineProfileFor(s.engine).kv_block_tokens;
  t.set_kv_block_size(block);
  // The engine's admission reserves whole sequences: a pool for max_batch_size of them per
  // engine (a pipeline's pp micro-batch engines each take 1/pp of it).
  const int64_t per_sequence = (s.isl + s.osl + block - 1) / block;
  t.set_num_kv_blocks(per_sequence * std::max<int64_t>(1, r.config().max_batch_size()) *
                      std::max(1, r.config().pp()));
  t.set_isl(s.isl);
  t.set_osl(s.osl);
  // Replicas are identical and the engines' router sends each request to the least-loaded
  // one (as the simulator does): one replica is run on its 1/R share of the clients, the
  // arrival rate and the requests. Disaggregated pools of P prefill and D decode instances
  // are run as P/g and D/g instances (g = gcd(P, D)) on a 1/g share.
  const int64_t replicas = VerifyShare(r.config());
  if (r.config().disaggregated()) {
    t.set_prefill_instances(r.config().prefill_replicas() / replicas);
    t.set_decode_instances(r.config().decode_replicas() / replicas);
  }
  const auto share = [replicas](int64_t n) { return (n + replicas - 1) / replicas; };
  t.set_concurrency(s.concurrency ? share(*s.concurrency) : 0);
  t.set_request_rate(s.request_rate.value_or(0) / static_cast<double>(replicas));
  t.set_num_requests(share(s.num_requests));
  t.set_seed(1);
  t.set_layout_rank(r.rank());
  return t;
}

}  // namespace

bool ServingVerifyRunsOnCuda(const v1::ServingVerifyTask& task) {
  return task.pp() <= 1 && task.prefill_instances() == 0;
}

Transition VerifyStage::StartInference(JobEntry& job) {
  const inference::InferenceJobSpec& spec = *job.inference;
  const int64_t k = spec.search.verify_top_k;
  if (k <= 0 || !job.record.results) return {v1::JOB_STATE_SUCCEEDED, ""};
  job.rankings_dirty = true;  // Verification statuses below.
  const std::string& job_id = job.record.job.id();
  // Rank slots of the largest CPU and CUDA workers of the device kind.
  int64_t largest_cpu = 0, largest_cuda = 0;
  for (const VerifyHost& h : workers_->VerifyHosts(spec.cluster.gpu)) {
    int64_t& largest = h.backend == "cpu" ? largest_cpu : largest_cuda;
    largest = std::max(largest, h.devices);
  }
  std::vector<TaskRecord> tasks;
  int64_t next_index = static_cast<int64_t>(job.tasks.size());
  int64_t chosen = 0;
  for (v1::InferenceRankedConfig& r : *job.record.results->mutable_inference()->mutable_ranked()) {
    if (chosen == k) break;
    ++chosen;
    v1::InferenceVerification* v = r.mutable_verification();
    if (std::string why = ServingUnsupportedReason(spec.model, r.config()); !why.empty()) {
      v->set_status(absl::StrCat("not verified: ", why));
      continue;
    }
    const v1::ServingVerifyTask verify_task = MakeServingVerifyTask(spec, r);
    const int64_t largest =
        std::max(largest_cpu, ServingVerifyRunsOnCuda(verify_task) ? largest_cuda : int64_t{0});
    if (VerifyRanks(r.config()) > largest) {
      v->set_status(absl::StrCat("not verified: needs ", VerifyRanks(r.config()),
                                 " ranks on one worker of device kind ", spec.cluster.gpu,
                                 " (CPU, or CUDA for aggregated layouts with pp 1)",
                                 ", the largest registered offers ", largest));
      continue;
    }
    TaskRecord t;
    t.task.set_id(absl::StrCat(job_id, "-t", next_index++));
    t.task.set_job_id(job_id);
    t.task.set_device_kind(spec.cluster.gpu);
    t.task.set_key(absl::StrCat("serving_verify/", r.rank()));
    *t.task.mutable_serving_verify() = verify_task;
    v->set_status("verifying");
    tasks.push_back(std::move(t));
  }
  return QueueTasks(job, std::move(tasks));
}

absl::Status VerifyStage::ApplyInferenceReport(TaskRecord& task, const std::string& worker_id,
                                               const v1::TaskResult& result) {
  TaskRecord updated = task;
  updated.result = result;
  updated.result->set_worker_id(worker_id);
  bool requeue = false;
  switch (result.outcome()) {
    case v1::TaskResult::OUTCOME_OK:
      updated.state = TaskState::kDone;
      break;
    case v1::TaskResult::OUTCOME_OOM:
    case v1::TaskResult::OUTCOME_UNSUPPORTED:  // Another attempt would end the same way.
      updated.state = TaskState::kFailed;
      break;
    default:  // FAILED, CANCELLED: again while attempts remain.
      requeue = RetryOrGiveUp(updated, broker_->max_attempts());
      break;
  }
  if (absl::Status s = store_->PutTasks({updated}); !s.ok()) {
    broker_->Add(task.task);  // Not recorded: the task goes back so that it is not lost.
    return s;
  }
  task = std::move(updated);
  if (requeue) broker_->Add(task.task);
  return absl::OkStatus();
}

std::optional<Transition> VerifyStage::CheckInference(JobEntry& job) const {
  std::map<int64_t, const TaskRecord*> runs;
  for (const TaskRecord& t : job.tasks) {
    if (!t.task.has_serving_verify()) continue;
    if (t.state == TaskState::kPending) return std::nullopt;
    runs[t.task.serving_verify().layout_rank()] = &t;
  }
  if (!job.record.results) {
    return Transition{v1::JOB_STATE_FAILED, "verifying: the ranking is missing"};
  }
  job.rankings_dirty = true;
  for (v1::InferenceRankedConfig& r : *job.record.results->mutable_inference()->mutable_ranked()) {
    auto it = runs.find(r.rank());
    if (it == runs.end()) continue;
    const TaskRecord& t = *it->second;
    v1::InferenceVerification* v = r.mutable_verification();
    if (t.state == TaskState::kDone && t.result && t.result->has_serving_verify()) {
      const v1::ServingVerifyResult& m = t.result->serving_verify();
      if (m.wrong() > 0) {
        v->set_status(absl::StrCat("not verified: ", m.wrong(), " of ", m.requests(),
                                   " requests did not complete as asked"));
        continue;
      }
      v->set_status("verified");
      *v->mutable_measured_ttft_ms() = m.ttft_ms();
      *v->mutable_measured_tpot_ms() = m.tpot_ms();
      *v->mutable_measured_e2e_latency_ms() = m.e2e_latency_ms();
      // One replica (or 1/g of the pools) ran its share: the layout's output is R (g) times.
      v->set_measured_output_tokens_per_sec(m.output_tokens_per_sec() *
                                            static_cast<double>(VerifyShare(r.config())));
      v->set_measured_requests(static_cast<int32_t>(m.requests()));
      continue;
    }
    const v1::TaskResult* res = t.result ? &*t.result : nullptr;
    std::string why = res == nullptr ? "no result" : res->message();
    if (res != nullptr && res->outcome() == v1::TaskResult::OUTCOME_OOM) {
      why = absl::StrCat("out of memory on the worker: ", why);
    }
    v->set_status(absl::StrCat("not verified: ", why));
  }
  return Transition{v1::JOB_STATE_SUCCEEDED, ""};
}

}  // namespace paratune::server
