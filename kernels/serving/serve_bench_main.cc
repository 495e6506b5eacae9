// paratune-serve-bench: continuous batching of a synthetic trace on the real serving
// kernels, a small Llama-style model under tensor parallelism over thread ranks (Gloo).
// Prints one row per round (nccl-tests style) and the spread over rounds; --json prints
// every round's summary and per-request records. The reference measured in the same run is
// an isolated decode step (serving_step_runner) of the batch the loop can reach
// (max_batch_size, capped by the clients and the requests) at context isl + osl/2: TPOT over it
// shows what batching, prefill chunks and the loop add.
//
//   paratune-serve-bench [--tp 2] [--pp 1] [--layers 4] [--hidden 512] [--heads 8] [--groups 4]
//       [--ffn 1408] [--vocab 4096] [--isl 128] [--osl 32] [--num_requests 32]
//       [--concurrency 8 | --rate 4.0] [--max_batch_size 8] [--max_num_tokens 256]
//       [--no_chunked_prefill] [--kv_block_size 16] [--kv_blocks 256] [--kv_dtype fp32]
//       [--weights none|int8|int4] [--experts 8 --topk 2 --expert_ffn 704 [--ep 2]
//       [--attention_dp]] [--prefill_instances 1 --decode_instances 1]
//       [--rounds 3] [--json]
// With --pp N the model runs as N pipeline stages of --tp ranks, N micro-batch engines in
// flight. With --prefill_instances and --decode_instances the trace runs disaggregated: that many
// prefill and decode instances of --tp ranks each, every prompt's KV cache moved from the
// prefill instance to a decode instance.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/serving/serve_loop.h"
#include "kernels/serving/serving_layouts.h"
#include "kernels/serving/serving_step_runner.h"

namespace paratune::kernels::serving {
namespace {

nlohmann::json DistJson(const Distribution& d, double unit) {
  return {{"mean", d.mean * unit}, {"p50", d.p50 * unit}, {"p90", d.p90 * unit},
          {"p99", d.p99 * unit},   {"min", d.min * unit}, {"max", d.max * unit}};
}

nlohmann::json RoundJson(const ServeResult& r, bool requests) {
  nlohmann::json j = {
      {"duration_s", r.duration_s},
      {"output_tokens", r.output_tokens()},
      {"output_tokens_per_s", r.output_tokens_per_s()},
      {"requests_per_s", r.duration_s > 0 ? r.requests.size() / r.duration_s : 0.0},
      {"ttft_ms", DistJson(r.ttft_s(), 1e3)},
      {"tpot_ms", DistJson(r.tpot_s(), 1e3)},
      {"e2e_latency_ms", DistJson(r.e2e_s(), 1e3)},
      {"mean_in_flight", r.mean_in_flight()},
      {"steps", r.steps.steps},
      {"prefill_tokens", r.steps.prefill_tokens},
      {"decode_tokens", r.steps.decode_tokens},
      {"max_step_tokens", r.steps.max_step_tokens},
      {"max_step_sequences", r.steps.max_step_sequences},
      {"phases_s",
       {{"gemm", r.steps.phases.layers.gemm_s},
        {"attention", r.steps.phases.layers.attention_s},
        {"other", r.steps.phases.layers.other_s},
        {"tp_comm", r.steps.phases.tp_comm_s},
        {"logits", r.steps.phases.logits_s},
        {"embedding", r.steps.phases.embedding_s}}},
      {"memory_bytes",
       {{"weights", r.weight_bytes}, {"kv_cache", r.kv_cache_bytes}, {"peak", r.peak_bytes}}}};
  if (requests) {
    nlohmann::json list = nlohmann::json::array();
    for (const RequestRecord& q : r.requests) {
      list.push_back({{"id", q.id},
                      {"isl", q.isl},
                      {"osl", q.osl},
                      {"output_tokens", q.output_tokens},
                      {"ttft_ms", q.ttft_s() * 1e3},
                      {"tpot_ms", q.tpot_s() * 1e3},
                      {"e2e_ms", q.e2e_s() * 1e3}});
    }
    j["requests"] = list;
  }
  return j;
}

// Requests whose record breaks an invariant of a completed run.
int64_t Wrong(const ServeResult& r) {
  int64_t wrong = 0;
  for (const RequestRecord& q : r.requests) {
    if (q.output_tokens != q.osl || q.ttft_s() < 0 || q.ttft_s() > q.e2e_s()) ++wrong;
  }
  return wrong;
}

int Main(int argc, char** argv) {
  CLI::App app{"paratune-serve-bench: continuous batching on the real serving kernels"};
  ServeOptions o;
  ServingConfig& m = o.model;
  m.shape.hidden_size = 512;
  m.shape.num_attention_heads = 8;
  m.shape.num_query_groups = 4;
  m.shape.ffn_hidden_size = 1408;
  m.shape.vocab_size = 4096;
  m.shape.activation = Activation::kSwiglu;
  m.shape.normalization = Normalization::kRmsNorm;
  m.num_layers = 4;
  m.kv_block_size = 16;
  m.num_kv_blocks = 256;
  o.trace.isl = 128;
  o.trace.osl = 32;
  o.trace.num_requests = 32;
  int64_t tp = 1, experts = 0, topk = 2, expert_ffn = 0, ep = 1;
  int rounds = 1;
  bool json = false, per_request = false, no_chunked = false;
  std::string kv_dtype = "fp32", weights = "none";
  app.add_option("--tp", tp, "tensor-parallel ranks (threads)");
  int64_t pp = 1;
  app.add_option("--pp", pp, "pipeline stages (each of --tp ranks)");
  app.add_option("--layers", m.num_layers);
  app.add_option("--hidden", m.shape.hidden_size);
  app.add_option("--heads", m.shape.num_attention_heads);
  app.add_option("--groups", m.shape.num_query_groups, "KV heads (GQA)");
  app.add_option("--ffn", m.shape.ffn_hidden_size);
  app.add_option("--vocab", m.shape.vocab_size);
  app.add_option("--isl", o.trace.isl, "mean input tokens");
  app.add_option("--osl", o.trace.osl, "output tokens");
  app.add_option("--isl_jitter", o.trace.isl_jitter, "lengths uniform in isl*[1-j, 1+j]");
  app.add_option("--osl_jitter", o.trace.osl_jitter);
  app.add_option("--num_requests", o.trace.num_requests);
  app.add_option("--concurrency", o.trace.concurrency, "closed-loop clients");
  app.add_option("--rate", o.trace.request_rate, "Poisson requests/s (neither: offline)");
  app.add_option("--seed", o.trace.seed);
  app.add_option("--max_batch_size", o.max_batch_size);
  app.add_option("--max_num_tokens", o.max_num_tokens);
  app.add_flag("--no_chunked_prefill", no_chunked);
  app.add_option("--kv_block_size", m.kv_block_size);
  app.add_option("--kv_blocks", m.num_kv_blocks, "KV blocks per rank and layer");
  app.add_option("--kv_dtype", kv_dtype, "fp32 | bf16 | fp8 (E4M3)");
  app.add_option("--window_size", m.attention_window,
                 "sliding-window attention: keys a query attends to (0: whole context)");
  app.add_option("--window_attn_skip_freq", m.window_attn_skip_freq,
                 "every n-th layer attends to the whole context (0: none)");
  app.add_option("--weights", weights, "none | int8 | int4 (weight-only)");
  app.add_option("--experts", experts, "routed SwiGLU experts in every layer (0: dense)");
  app.add_option("--topk", topk, "experts per token");
  app.add_option("--expert_ffn", expert_ffn, "FFN size of one expert (0: --ffn)");
  app.add_option("--ep", ep, "expert-parallel ranks inside tp (each expert over tp / ep)");
  bool attention_dp = false;
  app.add_flag("--attention_dp", attention_dp,
               "each rank its own requests, attention whole (needs --experts, --ep = --tp)");
  app.add_option("--prefill_instances", o.prefill_instances,
                 "disaggregated: prefill instances of --tp ranks (with --decode_instances)");
  app.add_option("--decode_instances", o.decode_instances,
                 "disaggregated: decode instances of --tp ranks (with --prefill_instances)");
  app.add_option("--warmup", o.warmup_steps, "untimed warm-up steps");
  app.add_option("--rounds", rounds, "repetitions of the whole trace");
  app.add_flag("--json", json);
  app.add_flag("--requests", per_request, "per-request records in the JSON");
  CLI11_PARSE(app, argc, argv);
  m.parallel.tp = tp;
  m.parallel.pp = pp;
  m.parallel.ep = ep;
  m.attention_dp = attention_dp;
  if (experts > 0) {
    MoeLayerConfig moe;
    moe.num_experts = experts;
    moe.topk = topk;
    moe.ffn_hidden = expert_ffn > 0 ? expert_ffn : m.ffn_hidden_size();
    moe.normalize_topk = true;
    m.moe = moe;
  }
  o.chunked_prefill = !no_chunked;
  auto dt = kv_dtype == "fp8" ? absl::StatusOr<DType>(DType::kFp8E4M3) : ParseDType(kv_dtype);
  auto wq = ParseWeightQuant(weights);
  if (!dt.ok() || !wq.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string((!dt.ok() ? dt.status() : wq.status()).message()).c_str());
    return 2;
  }
  m.kv_dtype = *dt;
  m.weight_quant = *wq;
  if (absl::Status s = o.Validate(); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  SetBlasThreads(1);  // one core per rank

  const std::string mode = o.trace.mode();
  if (!json) {
    std::printf(
        "# paratune-serve-bench: %lld layers h %lld a %lld g %lld f %lld V %lld, tp %lld, pp "
        "%lld, weights %s, kv %s (block %lld x %lld)\n",
        (long long)m.num_layers, (long long)m.shape.hidden_size,
        (long long)m.shape.num_attention_heads, (long long)m.num_query_groups(),
        (long long)m.ffn_hidden_size(), (long long)m.shape.vocab_size, (long long)tp, (long long)pp,
        weights.c_str(), kv_dtype.c_str(), (long long)m.num_kv_blocks, (long long)m.kv_block_size);
    if (m.moe.has_value()) {
      std::printf("# experts: %lld of %lld, top-%lld, ep %lld%s\n", (long long)experts,
                  (long long)m.moe->ffn_hidden, (long long)topk, (long long)ep,
                  attention_dp ? ", attention data parallelism" : "");
    }
    if (o.disaggregated()) {
      std::printf("# disaggregated: %lld prefill and %lld decode instances of tp %lld\n",
                  (long long)o.prefill_instances, (long long)o.decode_instances, (long long)tp);
    }
    std::printf("# trace: %lld requests, isl %lld, osl %lld, %s", (long long)o.trace.num_requests,
                (long long)o.trace.isl, (long long)o.trace.osl, mode.c_str());
    if (o.trace.concurrency > 0) std::printf(" %lld", (long long)o.trace.concurrency);
    if (o.trace.request_rate > 0) std::printf(" %.3g req/s", o.trace.request_rate);
    std::printf("; max_batch_size %lld, max_num_tokens %lld, chunked prefill %s",
                (long long)o.max_batch_size, (long long)o.max_num_tokens,
                o.chunked_prefill ? "on" : "off");
    if (m.attention_window > 0) {
      std::printf("; window %lld (every %lld-th layer whole-context)",
                  (long long)m.attention_window, (long long)m.window_attn_skip_freq);
    }
    std::printf("\n");
    std::printf("# %5s %9s %9s %9s %9s %9s %9s %9s %7s %6s %6s\n", "round", "ttft_p50", "ttft_p99",
                "tpot_p50", "tpot_p99", "e2e_p50", "e2e_p99", "out_tok/s", "steps", "L", "#wrong");
    std::printf("# %5s %9s %9s %9s %9s %9s %9s %9s %7s %6s %6s\n", "", "(ms)", "(ms)", "(ms)",
                "(ms)", "(ms)", "(ms)", "(tok/s)", "", "(req)", "");
  }
  std::vector<ServeResult> results;
  int64_t wrong_total = 0;
  for (int round = 0; round < rounds; ++round) {
    auto r = RunServeLoop(o);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
      return r.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    const int64_t wrong = Wrong(*r);
    wrong_total += wrong;
    if (!json) {
      const Distribution ttft = r->ttft_s(), tpot = r->tpot_s(), e2e = r->e2e_s();
      std::printf("  %5d %9.2f %9.2f %9.3f %9.3f %9.1f %9.1f %9.1f %7lld %6.2f %6lld\n", round,
                  ttft.p50 * 1e3, ttft.p99 * 1e3, tpot.p50 * 1e3, tpot.p99 * 1e3, e2e.p50 * 1e3,
                  e2e.p99 * 1e3, r->output_tokens_per_s(), (long long)r->steps.steps,
                  r->mean_in_flight(), (long long)wrong);
    }
    results.push_back(std::move(*r));
  }
  // The reference runs after the rounds, in the warmed-up process.
  const ServingStepConfig ref = ReferenceDecodeStep(o);
  absl::StatusOr<ServingStepResult> ref_step = RunServingStep(ref);
  if (!ref_step.ok()) {
    std::fprintf(stderr, "reference decode step: %s\n",
                 std::string(ref_step.status().message()).c_str());
    return 1;
  }
  const double ref_ms = ref_step->phases[0].median_s * 1e3;
  std::vector<double> tpot, ttft, tput;
  for (const ServeResult& r : results) {
    tpot.push_back(r.tpot_s().p50 * 1e3);
    ttft.push_back(r.ttft_s().p50 * 1e3);
    tput.push_back(r.output_tokens_per_s());
  }
  const Distribution tpot_d = Summarize(tpot), ttft_d = Summarize(ttft), tput_d = Summarize(tput);
  auto spread = [](const Distribution& d) { return d.p50 > 0 ? (d.max - d.min) / d.p50 : 0.0; };
  if (json) {
    nlohmann::json out = {{"config",
                           {{"tp", tp},
                            {"pp", pp},
                            {"ep", ep},
                            {"attention_dp", attention_dp},
                            {"prefill_instances", o.prefill_instances},
                            {"decode_instances", o.decode_instances},
                            {"experts", experts},
                            {"topk", topk},
                            {"expert_ffn", m.moe.has_value() ? m.moe->ffn_hidden : 0},
                            {"layers", m.num_layers},
                            {"hidden_size", m.shape.hidden_size},
                            {"num_attention_heads", m.shape.num_attention_heads},
                            {"num_query_groups", m.num_query_groups()},
                            {"ffn_hidden_size", m.ffn_hidden_size()},
                            {"vocab_size", m.shape.vocab_size},
                            {"weights", weights},
                            {"kv_dtype", kv_dtype},
                            {"kv_block_size", m.kv_block_size},
                            {"kv_blocks", m.num_kv_blocks},
                            {"max_batch_size", o.max_batch_size},
                            {"max_num_tokens", o.max_num_tokens},
                            {"chunked_prefill", o.chunked_prefill}}},
                          {"trace",
                           {{"mode", mode},
                            {"num_requests", o.trace.num_requests},
                            {"isl", o.trace.isl},
                            {"osl", o.trace.osl},
                            {"concurrency", o.trace.concurrency},
                            {"request_rate", o.trace.request_rate},
                            {"seed", o.trace.seed}}},
                          {"summary",
                           {{"tpot_p50_ms", DistJson(tpot_d, 1.0)},
                            {"ttft_p50_ms", DistJson(ttft_d, 1.0)},
                            {"output_tokens_per_s", DistJson(tput_d, 1.0)},
                            {"rounds", rounds},
                            {"wrong", wrong_total}}},
                          {"reference",
                           {{"decode_step_ms", ref_ms},
                            {"batch", ref.batch},
                            {"context", ref.context_length},
                            {"tpot_p50_over_reference", ref_ms > 0 ? tpot_d.p50 / ref_ms : 0.0}}}};
    nlohmann::json list = nlohmann::json::array();
    for (const ServeResult& r : results) list.push_back(RoundJson(r, per_request));
    out["rounds"] = list;
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf(
        "# reference: isolated decode step, batch %lld at context %lld: %.3f ms; "
        "tpot_p50 / reference = %.2f\n",
        (long long)ref.batch, (long long)ref.context_length, ref_ms,
        ref_ms > 0 ? tpot_d.p50 / ref_ms : 0.0);
    std::printf(
        "# median over %d rounds: tpot_p50 %.3f ms (spread %.1f %%), ttft_p50 %.2f ms "
        "(spread %.1f %%), %.1f output tok/s (spread %.1f %%); #wrong %lld\n",
        rounds, tpot_d.p50, 100 * spread(tpot_d), ttft_d.p50, 100 * spread(ttft_d), tput_d.p50,
        100 * spread(tput_d), (long long)wrong_total);
  }
  return wrong_total == 0 ? 0 : 1;
}

}  // namespace
}  // namespace paratune::kernels::serving

int main(int argc, char** argv) { return paratune::kernels::serving::Main(argc, argv); }
