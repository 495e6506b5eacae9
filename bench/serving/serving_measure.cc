// serving_measure: the measured half of serving accuracy. Runs the serving layouts of a
// small model (kernels/serving/serving_layouts.h: tp 1 and 2, max_batch_size 4 and 16,
// offline and closed-loop concurrency 8) through the real serving loop for --rounds rounds,
// interleaved, and prints per layout the median over rounds of TPOT p50, TTFT p50 and
// output tokens/s with their spread ((max − min)/median), and the median of an isolated
// decode step at the batch the layout reaches (dec_step). --json emits every round, the
// form a planner's predictions are compared against.
//
//   serving_measure [--rounds 3] [--layouts tp1-mbs4-offline,...] [--json]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/serving/serving_layouts.h"

namespace paratune::kernels::serving {
namespace {

double Median(const std::vector<double>& v) { return Summarize(v).p50; }

int Main(int argc, char** argv) {
  CLI::App app{"serving_measure: serving layouts of a small model on the real serving loop"};
  int rounds = 3;
  std::vector<std::string> only;
  bool json = false;
  app.add_option("--rounds", rounds, "rounds per layout (interleaved)");
  app.add_option("--layouts", only, "layout names to run (default: all)")->delimiter(',');
  app.add_flag("--json", json);
  CLI11_PARSE(app, argc, argv);
  if (rounds < 1) {
    std::fprintf(stderr, "rounds (%d) must be >= 1\n", rounds);
    return 2;
  }
  std::vector<ServingLayout> layouts;
  const std::set<std::string> wanted(only.begin(), only.end());
  for (const ServingLayout& l : AccuracyLayouts()) {
    if (wanted.empty() || wanted.count(l.name)) layouts.push_back(l);
  }
  if (layouts.empty()) {
    std::fprintf(stderr, "no layout matches --layouts\n");
    return 2;
  }
  SetBlasThreads(1);
  absl::StatusOr<std::vector<LayoutMeasurement>> measured = MeasureLayouts(layouts, rounds);
  if (!measured.ok()) {
    std::fprintf(stderr, "%s\n", std::string(measured.status().message()).c_str());
    return 1;
  }
  int64_t wrong = 0;
  std::vector<double> spreads_tpot, spreads_ttft, spreads_tput;
  for (const LayoutMeasurement& m : *measured) {
    wrong += m.wrong;
    spreads_tpot.push_back(RelativeSpread(m.tpot_p50_ms));
    spreads_ttft.push_back(RelativeSpread(m.ttft_p50_ms));
    spreads_tput.push_back(RelativeSpread(m.output_tokens_per_s));
  }
  if (json) {
    nlohmann::json list = nlohmann::json::array();
    for (const LayoutMeasurement& m : *measured) {
      const ServeOptions& o = m.layout.options;
      list.push_back({{"name", m.layout.name},
                      {"config",
                       {{"tp", o.model.parallel.tp},
                        {"max_batch_size", o.max_batch_size},
                        {"max_num_tokens", o.max_num_tokens},
                        {"chunked_prefill", o.chunked_prefill},
                        {"layers", o.model.num_layers},
                        {"hidden_size", o.model.shape.hidden_size},
                        {"num_attention_heads", o.model.shape.num_attention_heads},
                        {"num_query_groups", o.model.num_query_groups()},
                        {"ffn_hidden_size", o.model.ffn_hidden_size()},
                        {"vocab_size", o.model.shape.vocab_size}}},
                      {"trace",
                       {{"mode", o.trace.mode()},
                        {"concurrency", o.trace.concurrency},
                        {"num_requests", o.trace.num_requests},
                        {"isl", o.trace.isl},
                        {"osl", o.trace.osl}}},
                      {"measured",
                       {{"tpot_p50_ms", Median(m.tpot_p50_ms)},
                        {"ttft_p50_ms", Median(m.ttft_p50_ms)},
                        {"output_tokens_per_s", Median(m.output_tokens_per_s)},
                        {"e2e_p50_ms", Median(m.e2e_p50_ms)},
                        {"decode_step_ms", Median(m.decode_step_ms)}}},
                      {"spread",
                       {{"tpot_p50", RelativeSpread(m.tpot_p50_ms)},
                        {"ttft_p50", RelativeSpread(m.ttft_p50_ms)},
                        {"output_tokens_per_s", RelativeSpread(m.output_tokens_per_s)}}},
                      {"rounds",
                       {{"tpot_p50_ms", m.tpot_p50_ms},
                        {"ttft_p50_ms", m.ttft_p50_ms},
                        {"output_tokens_per_s", m.output_tokens_per_s},
                        {"e2e_p50_ms", m.e2e_p50_ms},
                        {"decode_step_ms", m.decode_step_ms}}},
                      {"wrong", m.wrong}});
    }
    std::printf("%s\n", nlohmann::json({{"rounds", rounds}, {"layouts", list}}).dump(2).c_str());
    return wrong == 0 ? 0 : 1;
  }
  std::printf(
      "# serving_measure: %d interleaved rounds per layout; medians over rounds, "
      "spread = (max - min)/median\n",
      rounds);
  std::printf("# %-18s %9s %7s %9s %7s %10s %7s %9s %6s\n", "layout", "tpot_p50", "spread",
              "ttft_p50", "spread", "out_tok/s", "spread", "dec_step", "#wrong");
  std::printf("# %-18s %9s %7s %9s %7s %10s %7s %9s %6s\n", "", "(ms)", "(%)", "(ms)", "(%)",
              "(tok/s)", "(%)", "(ms)", "");
  for (const LayoutMeasurement& m : *measured) {
    std::printf("  %-18s %9.3f %7.1f %9.2f %7.1f %10.1f %7.1f %9.3f %6lld\n", m.layout.name.c_str(),
                Median(m.tpot_p50_ms), 100 * RelativeSpread(m.tpot_p50_ms), Median(m.ttft_p50_ms),
                100 * RelativeSpread(m.ttft_p50_ms), Median(m.output_tokens_per_s),
                100 * RelativeSpread(m.output_tokens_per_s), Median(m.decode_step_ms),
                (long long)m.wrong);
  }
  std::printf(
      "# median spread over layouts: tpot_p50 %.1f %%, ttft_p50 %.1f %%, output tok/s "
      "%.1f %%; #wrong %lld\n",
      100 * Median(spreads_tpot), 100 * Median(spreads_ttft), 100 * Median(spreads_tput),
      (long long)wrong);
  return wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace paratune::kernels::serving

int main(int argc, char** argv) { return paratune::kernels::serving::Main(argc, argv); }
