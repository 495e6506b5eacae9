// serving_accuracy: the inference planner's profile composition against the real serving
// loop, on this machine. The serving layouts of a small model (kernels/serving/
// serving_layouts.h: tp 1 and 2, max_batch_size 4 and 16, offline and closed-loop
// concurrency 8; here with int8 weights and a bf16 KV cache in blocks of TensorRT-LLM's 64
// tokens, formats both the planner and the CPU kernels know) are each
//   predicted: the layout pinned in an inference spec (cluster.gpu cpu), its serving_step
//     grid (inference/serving_profile.h) run through the worker's kernels executor, the
//     measurements composed into the simulation (inference::ComposeInference), and
//   measured: the serving loop (kernels/serving/serve_loop.h) on the same trace,
// round by round with the layouts interleaved (the grid is measured again every round), so
// drift of the shared host's load reaches all layouts and both halves alike. Prints the
// median over rounds of predicted and measured TPOT p50, TTFT p50 and output tokens/s,
// the error (predicted − measured)/measured and the spread of the measured rounds
// ((max − min)/median), and a summary of the absolute errors.
//
// With --experts E every layer is an expert layer of E SwiGLU experts of the model's FFN
// width, top-2 (a Mixtral-like model; each expert split over the tp ranks); --ep N puts the
// experts of the layouts whose tp N divides on N expert-parallel ranks (named "-epN"), and
// --attention_dp also runs those with ep = tp with attention data parallelism ("-adp").
// --disaggregated runs every layout as one prefill and one decode instance ("-pd"; 2 x tp
// ranks, each request's KV cache moved between them); --pp N as N pipeline stages ("-ppN";
// N x tp ranks, N micro-batch engines in flight), predicted from the tp shape's steps.
//
//   serving_accuracy [--rounds 3] [--iters 5] [--layouts tp1-mbs4-offline,...] [--experts E]
//                    [--ep N [--attention_dp]] [--disaggregated | --pp N] [--json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "inference/planner.h"
#include "inference/serving_profile.h"
#include "kernels/backend.h"
#include "kernels/serving/serve_loop.h"
#include "kernels/serving/serving_layouts.h"
#include "server/convert_inference.h"
#include "worker/device_discovery.h"
#include "worker/kernels_executor.h"

namespace paratune {
namespace {

namespace ks = kernels::serving;
using inference::InferenceJobSpec;

// The layout as an inference spec with every search dimension pinned.
InferenceJobSpec SpecFor(const ks::ServingLayout& l) {
  const ks::ServeOptions& o = l.options;
  InferenceJobSpec spec;
  spec.name = l.name;
  ModelSpec& m = spec.model;
  m.name = "small-llama";
  m.num_layers = o.model.num_layers;
  m.hidden_size = o.model.shape.hidden_size;
  m.num_attention_heads = o.model.shape.num_attention_heads;
  m.num_query_groups = o.model.shape.num_query_groups;
  m.ffn_hidden_size = o.model.shape.ffn_hidden_size;
  m.vocab_size = o.model.shape.vocab_size;
  m.activation = o.model.shape.activation;
  m.normalization = o.model.shape.normalization;
  m.position_embedding = o.model.position_embedding;
  if (o.model.moe.has_value()) {
    m.name = "small-mixtral";
    m.num_experts = o.model.moe->num_experts;
    m.moe_router_topk = o.model.moe->topk;
    m.moe_ffn_hidden_size = o.model.moe->ffn_hidden;
  }
  spec.cluster.gpu = "cpu";
  spec.cluster.num_gpus = o.model.parallel.tp * o.model.parallel.pp *
                          (o.disaggregated() ? o.prefill_instances + o.decode_instances : 1);
  spec.cluster.gpus_per_node = 2;
  inference::ServingSpec& s = spec.serving;
  s.engine = inference::ServingEngine::kTrtllm;
  s.isl = o.trace.isl;
  s.osl = o.trace.osl;
  if (o.trace.concurrency > 0) s.concurrency = o.trace.concurrency;
  s.num_requests = o.trace.num_requests;
  inference::ServingSearchOptions& x = spec.search;
  x.tp = {o.model.parallel.tp};
  x.ep = {o.model.parallel.ep};
  x.attention_dp = {o.model.attention_dp};
  x.pp = {o.model.parallel.pp};
  if (o.disaggregated()) {
    x.prefill_replicas = {o.prefill_instances};
    x.decode_replicas = {o.decode_instances};
  } else {
    x.replicas = {1};
  }
  x.max_batch_size = {o.max_batch_size};
  x.max_num_tokens = {o.max_num_tokens};
  x.weight_precision = {inference::QuantFormat::kInt8};
  x.kv_cache_precision = {inference::QuantFormat::kBf16};
  x.disaggregated = {o.disaggregated()};
  x.top_k = 1;
  return spec;
}

double Median(std::vector<double> v) { return ks::Summarize(std::move(v)).p50; }

double Error(double predicted, double measured) {
  return measured > 0 ? (predicted - measured) / measured * 100 : 0;
}

struct Row {
  ks::ServingLayout layout;
  InferenceJobSpec spec;
  inference::InferencePlanResult modelled;
  inference::ServingProfilePlan profile;
  std::vector<double> pred_tpot, pred_ttft, pred_tput;  // Per round.
  std::vector<double> tpot, ttft, tput;
  int64_t wrong = 0;
};

int Main(int argc, char** argv) {
  CLI::App app{"serving_accuracy: profile-composed serving predictions against the serving loop"};
  int rounds = 3;
  int64_t iters = 5;
  std::vector<std::string> only;
  bool json = false;
  bool show_steps = false;
  int64_t experts = 0, ep = 1;
  app.add_option("--rounds", rounds, "rounds (layouts interleaved within each)");
  app.add_option("--iters", iters, "timed steps per serving_step task (their median is used)");
  app.add_option("--layouts", only, "layout names to run (default: all)")->delimiter(',');
  app.add_flag("--json", json);
  app.add_flag("--steps", show_steps, "print every measured serving step (to stderr)");
  app.add_option("--experts", experts,
                 "every layer an expert layer of this many experts, top-2 (0: dense)");
  app.add_option("--ep", ep, "expert-parallel ranks of the layouts whose tp it divides");
  bool attention_dp = false;
  app.add_flag("--attention_dp", attention_dp,
               "attention data parallelism for the layouts with ep = tp (needs --ep)");
  bool disaggregated = false;
  app.add_flag("--disaggregated", disaggregated,
               "one prefill and one decode instance per layout (2 x tp ranks)");
  int64_t pp = 1;
  app.add_option("--pp", pp, "pipeline stages per layout (pp x tp ranks)");
  CLI11_PARSE(app, argc, argv);
  if (pp < 1 || pp > 2 || (pp > 1 && (disaggregated || attention_dp))) {
    std::fprintf(stderr,
                 "pp (%lld) must be 1 or 2 (the model's 2 layers) and, at 2, without "
                 "--disaggregated and --attention_dp\n",
                 static_cast<long long>(pp));
    return 2;
  }
  if (disaggregated && attention_dp) {
    std::fprintf(stderr, "--disaggregated does not run with --attention_dp\n");
    return 2;
  }
  if (ep < 1 || (ep > 1 && (experts == 0 || experts % ep != 0))) {
    std::fprintf(stderr, "ep (%lld) must be >= 1 and, above 1, divide --experts (%lld)\n",
                 static_cast<long long>(ep), static_cast<long long>(experts));
    return 2;
  }
  if (experts == 1 || experts < 0) {
    std::fprintf(stderr, "experts (%lld) must be 0 or at least 2\n",
                 static_cast<long long>(experts));
    return 2;
  }
  if (rounds < 1 || iters < 1) {
    std::fprintf(stderr, "rounds (%d) and iters (%lld) must be >= 1\n", rounds,
                 static_cast<long long>(iters));
    return 2;
  }
  kernels::SetBlasThreads(1);
  const std::set<std::string> wanted(only.begin(), only.end());
  std::vector<Row> rows;
  for (ks::ServingLayout l : ks::AccuracyLayouts()) {
    if (!wanted.empty() && wanted.count(l.name) == 0) continue;
    l.options.model.weight_quant = ks::WeightQuant::kInt8;
    l.options.model.kv_dtype = kernels::DType::kBF16;
    l.options.model.kv_block_size = 64;
    l.options.model.num_kv_blocks = 64;
    if (experts > 0) {
      kernels::MoeLayerConfig moe;
      moe.num_experts = experts;
      moe.topk = 2;
      moe.ffn_hidden = l.options.model.ffn_hidden_size();
      l.options.model.moe = moe;
      if (ep > 1 && l.options.model.parallel.tp % ep == 0) {
        l.options.model.parallel.ep = ep;
        l.name += absl::StrFormat("-ep%d", ep);
        if (attention_dp && ep == l.options.model.parallel.tp) {
          l.options.model.attention_dp = true;
          l.name += "-adp";
        }
      }
    }
    if (disaggregated) {
      l.options.prefill_instances = 1;
      l.options.decode_instances = 1;
      l.name += "-pd";
    }
    if (pp > 1) {
      l.options.model.parallel.pp = pp;
      l.name += absl::StrFormat("-pp%d", pp);
    }
    Row row;
    row.layout = l;
    row.spec = SpecFor(l);
    absl::StatusOr<inference::InferencePlanResult> plan = inference::PlanInference(row.spec);
    if (!plan.ok() || plan->ranked.size() != 1) {
      std::fprintf(stderr, "%s: planning failed: %s\n", l.name.c_str(),
                   plan.ok() ? "no layout" : std::string(plan.status().message()).c_str());
      return 1;
    }
    inference::ServingProfileOptions po;
    po.iters = iters;
    absl::StatusOr<inference::ServingProfilePlan> profile =
        inference::PlanServingProfiles(row.spec, *plan, po);
    if (!profile.ok()) {
      std::fprintf(stderr, "%s: %s\n", l.name.c_str(),
                   std::string(profile.status().message()).c_str());
      return 1;
    }
    row.modelled = *std::move(plan);
    row.profile = *std::move(profile);
    rows.push_back(std::move(row));
  }
  if (rows.empty()) {
    std::fprintf(stderr, "no layout matches --layouts\n");
    return 2;
  }
  std::vector<int> slots = {0, 1};
  absl::StatusOr<worker::DeviceInventory> inventory = worker::DiscoverDevices("cpu", slots, "");
  if (!inventory.ok()) {
    std::fprintf(stderr, "%s\n", std::string(inventory.status().message()).c_str());
    return 1;
  }
  std::shared_ptr<worker::TaskExecutor> executor = worker::CreateKernelsExecutor(*inventory);
  worker::CancelFlag cancel;
  size_t tasks_run = 0;
  for (int r = 0; r < rounds; ++r) {
    std::map<std::string, inference::StepSample> measured_steps;  // This round's, by key.
    for (Row& row : rows) {
      inference::ServingMeasurements m;
      for (const inference::ServingStepTaskSpec& t : row.profile.steps) {
        auto it = measured_steps.find(t.Key());
        if (it == measured_steps.end()) {
          const v1::ProfileTask task = server::ToProto(t);
          const v1::TaskResult result = executor->Execute(task, cancel);
          absl::StatusOr<inference::StepSample> sample =
              result.outcome() == v1::TaskResult::OUTCOME_OK
                  ? server::StepSampleFromResult(task.serving_step(), result)
                  : absl::StatusOr<inference::StepSample>(absl::InternalError(result.message()));
          if (!sample.ok()) {
            std::fprintf(stderr, "%s: %s\n", t.Key().c_str(),
                         std::string(sample.status().message()).c_str());
            return 1;
          }
          ++tasks_run;
          if (show_steps) {
            std::fprintf(stderr,
                         "# round %d %s: total %.3f ms, gemm %.3f, attention %.3f, tp_comm %.3f, "
                         "logits %.3f\n",
                         r, t.Key().c_str(), sample->total_s * 1e3, sample->gemm_s * 1e3,
                         sample->attention_s * 1e3, sample->tp_comm_s * 1e3,
                         sample->logits_s * 1e3);
          }
          it = measured_steps.emplace(t.Key(), *sample).first;
        }
        m.steps[t.shape].push_back(it->second);
      }
      absl::StatusOr<inference::InferencePlanResult> composed =
          inference::ComposeInference(row.spec, row.modelled, m);
      if (!composed.ok() || composed->ranked.empty()) {
        std::fprintf(
            stderr, "%s: composing failed: %s\n", row.layout.name.c_str(),
            composed.ok() ? "no layout" : std::string(composed.status().message()).c_str());
        return 1;
      }
      const inference::InferenceRankedConfig& p = composed->ranked.front();
      row.pred_tpot.push_back(p.tpot_ms.p50);
      row.pred_ttft.push_back(p.ttft_ms.p50);
      row.pred_tput.push_back(p.output_tokens_per_sec);

      absl::StatusOr<ks::ServeResult> served = ks::RunServeLoop(row.layout.options);
      if (!served.ok()) {
        std::fprintf(stderr, "%s: serving loop: %s\n", row.layout.name.c_str(),
                     std::string(served.status().message()).c_str());
        return 1;
      }
      row.tpot.push_back(served->tpot_s().p50 * 1e3);
      row.ttft.push_back(served->ttft_s().p50 * 1e3);
      row.tput.push_back(served->output_tokens_per_s());
      for (const ks::RequestRecord& q : served->requests) {
        if (q.output_tokens != q.osl || q.ttft_s() > q.e2e_s()) ++row.wrong;
      }
    }
  }

  std::vector<double> err_tpot, err_ttft, err_tput, all, spreads;
  nlohmann::json out = nlohmann::json::array();
  if (!json) {
    std::printf(
        "# serving_accuracy: %zu layouts x %d rounds (interleaved), %zu serving_step "
        "tasks run, %lld timed steps each\n",
        rows.size(), rounds, tasks_run, static_cast<long long>(iters));
    std::printf(
        "# predicted: profile composition (cluster.gpu cpu, engine trtllm); measured: "
        "the serving loop; err = (pred - meas) / meas; spread = (max - min) / median "
        "of the measured rounds\n");
    std::printf("# %-18s %8s %8s %7s %6s %9s %9s %7s %6s %8s %8s %7s %6s %6s\n", "layout",
                "tpot_pr", "tpot_me", "err%", "spr%", "ttft_pr", "ttft_me", "err%", "spr%",
                "tok/s_pr", "tok/s_me", "err%", "spr%", "#wrong");
    std::printf("# %-18s %8s %8s %7s %6s %9s %9s %7s %6s %8s %8s %7s %6s %6s\n", "", "ms", "ms", "",
                "", "ms", "ms", "", "", "", "", "", "", "");
  }
  int64_t wrong = 0;
  for (const Row& row : rows) {
    const double pt = Median(row.pred_tpot), mt = Median(row.tpot);
    const double pf = Median(row.pred_ttft), mf = Median(row.ttft);
    const double pu = Median(row.pred_tput), mu = Median(row.tput);
    const double et = Error(pt, mt), ef = Error(pf, mf), eu = Error(pu, mu);
    const double st = ks::RelativeSpread(row.tpot) * 100, sf = ks::RelativeSpread(row.ttft) * 100,
                 su = ks::RelativeSpread(row.tput) * 100;
    err_tpot.push_back(std::abs(et));
    err_ttft.push_back(std::abs(ef));
    err_tput.push_back(std::abs(eu));
    all.insert(all.end(), {std::abs(et), std::abs(ef), std::abs(eu)});
    spreads.insert(spreads.end(), {st, sf, su});
    wrong += row.wrong;
    if (json) {
      out.push_back(
          {{"layout", row.layout.name},
           {"predicted",
            {{"tpot_p50_ms", row.pred_tpot},
             {"ttft_p50_ms", row.pred_ttft},
             {"output_tokens_per_s", row.pred_tput}}},
           {"measured",
            {{"tpot_p50_ms", row.tpot},
             {"ttft_p50_ms", row.ttft},
             {"output_tokens_per_s", row.tput}}},
           {"error_pct", {{"tpot_p50", et}, {"ttft_p50", ef}, {"output_tokens_per_s", eu}}},
           {"wrong", row.wrong}});
      continue;
    }
    std::printf(
        "  %-18s %8.3f %8.3f %+7.1f %6.1f %9.2f %9.2f %+7.1f %6.1f %8.0f %8.0f %+7.1f "
        "%6.1f %6lld\n",
        row.layout.name.c_str(), pt, mt, et, st, pf, mf, ef, sf, pu, mu, eu, su,
        static_cast<long long>(row.wrong));
  }
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return wrong == 0 ? 0 : 1;
  }
  std::printf(
      "# model error (median |err|): TPOT p50 %.1f %%, TTFT p50 %.1f %%, output tok/s "
      "%.1f %%; all figures %.1f %% (max %.1f %%; target <= 15 %%)\n",
      Median(err_tpot), Median(err_ttft), Median(err_tput), Median(all),
      *std::max_element(all.begin(), all.end()));
  std::printf("# measured spread over rounds: median %.1f %%, max %.1f %%; #wrong %lld\n",
              Median(spreads), *std::max_element(spreads.begin(), spreads.end()),
              static_cast<long long>(wrong));
  return wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace paratune

int main(int argc, char** argv) { return paratune::Main(argc, argv); }
