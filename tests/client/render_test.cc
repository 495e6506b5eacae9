// The CLI's output forms: the ranked table, the CSV, and --json in the proto JSON mapping
// (one dialect for `plan --json`, `estimate --json` and `results --json`).
#include "client/render.h"

#include <set>

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_split.h"
#include "search/planner.h"
#include "search/spec_io.h"
#include "server/convert.h"

namespace paratune::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using nlohmann::json;

/// A spec for the table's header: GPT-3 175B on 1024 A100s.
JobSpec HeaderSpec() {
  absl::StatusOr<JobSpec> spec = JobSpecFromJson(json::parse(R"({
    "model": {"preset": "gpt3-175b"},
    "training": {"seq_length": 2048, "global_batch_size": 1536},
    "cluster": {"gpu": "a100-80gb", "num_gpus": 1024}})"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

PlanResult SamplePlan() {
  PlanResult plan;
  RankedConfig best;
  best.rank = 1;
  best.config.tp = 8;
  best.config.pp = 12;
  best.config.dp = 10;
  best.config.vp = 2;
  best.config.micro_batch_size = 1;
  best.config.sequence_parallel = true;
  best.config.recompute = Recompute::kSelective;
  best.config.data_parallel_sharding = DataParallelSharding::kOptimizer;
  best.iteration_time_s = 12.5;
  best.tokens_per_sec_per_gpu = 262.1;
  best.model_tflops_per_gpu = 150;
  best.hardware_tflops_per_gpu = 155;
  best.mfu = 0.4808;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  best.memory = {2 * gib, 4 * gib, 1.5 * gib, 40 * gib, 3 * gib, 80 * gib};
  best.time = {10, 0.5, 0, 1.5, 0.1, 0.3, 0.1};
  best.time_to_train_days = 12.25;
  best.notes = {"pipeline bubble 12%", "fits with 29.5 GiB to spare"};
  RankedConfig oom = best;
  oom.rank = 2;
  oom.config.recompute = Recompute::kFull;
  oom.config.recompute_num_layers = 2;
  oom.fits = false;
  oom.time_to_train_days = 0;
  oom.notes = {};
  plan.ranked = {best, oom};
  plan.candidates_considered = 4321;
  plan.feasible = 17;
  plan.elapsed_ms = 12.5;
  RejectedConfig rejected;
  rejected.config.tp = 3;
  rejected.reason = "tp (3) must divide model.num_attention_heads (96), and more, \"quoted\"";
  plan.rejected = {rejected};
  return plan;
}

TEST(RenderTest, TableFitsEightyColumns) {
  const JobSpec spec = HeaderSpec();
  const std::string table = FormatPlanTable(SamplePlan(), spec);
  EXPECT_TRUE(table.starts_with(
      "# gpt3-175b: L=96 h=12288 a=96 | 1024 x a100-80gb (8/node) | B=1536 s=2048 bf16\n"))
      << table;
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    EXPECT_LE(line.size(), 80u) << line;
  }
  EXPECT_THAT(table, HasSubstr("rank TP PP    DP CP VP  mb SP recompute dopt"));
  EXPECT_THAT(table, HasSubstr("   1  8 12    10  1  2   1  y selective    y   12.500       "
                               "262  48.1%    50.5 "));
  EXPECT_THAT(table, HasSubstr("full/2"));
  // The layout's settings beyond the columns, under its row.
  PlanResult moe = SamplePlan();
  moe.ranked[0].config.ep = 8;
  moe.ranked[0].config.moe_token_dispatcher = MoeTokenDispatcher::kFlex;
  moe.ranked[0].config.activation_offload = true;
  const std::string moe_table = FormatPlanTable(moe, spec);
  EXPECT_THAT(moe_table, HasSubstr("48.1%    50.5 \n     + act-offload ep8 etp1 flex\n"))
      << moe_table;
  EXPECT_THAT(table, Not(HasSubstr("     + ")));
  EXPECT_THAT(table, HasSubstr("50.5!"));
  EXPECT_THAT(table, HasSubstr("# 4321 candidates, 17 feasible, 1 rejected with a reason"));
  EXPECT_THAT(table, HasSubstr("# rank 1: pipeline bubble 12%"));
  EXPECT_THAT(table, Not(HasSubstr("# rejected")));
  // A coordinator's results list only the first rejected layouts; the count is of all.
  PlanResult capped = SamplePlan();
  capped.rejected_total = 18000;
  EXPECT_THAT(FormatPlanTable(capped, spec),
              HasSubstr("# 4321 candidates, 17 feasible, 18000 rejected with a reason"));

  // When nothing is feasible, the table says why.
  PlanResult none = SamplePlan();
  none.ranked.clear();
  none.feasible = 0;
  const std::string empty = FormatPlanTable(none, spec);
  EXPECT_THAT(empty, HasSubstr("(no layout to rank)"));
  EXPECT_THAT(empty, HasSubstr("# rejected tp3 "));
  EXPECT_THAT(empty, HasSubstr(": tp (3) must divide model.num_attention_heads (96)"));
}

/// Splits one CSV line into fields, honouring quotes.
std::vector<std::string> CsvFields(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

TEST(RenderTest, CsvHasOneRowPerCandidate) {
  const std::string csv = FormatPlanCsv(SamplePlan());
  std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u);  // header, 2 ranked, 1 rejected
  const auto header = CsvFields(lines[0]);
  EXPECT_EQ(header.size(), 28u);
  for (const std::string& line : lines) EXPECT_EQ(CsvFields(line).size(), header.size()) << line;
  const auto best = CsvFields(lines[1]);
  EXPECT_EQ(best[0], "1");
  EXPECT_EQ(best[1], "8");
  EXPECT_EQ(best[8], "selective");
  EXPECT_EQ(best[16], "50.5");  // peak_gib
  EXPECT_EQ(best[26], "ranked");
  const auto rejected = CsvFields(lines[3]);
  EXPECT_EQ(rejected[26], "rejected");
  EXPECT_EQ(rejected[27],
            "tp (3) must divide model.num_attention_heads (96), and more, \"quoted\"");
}

TEST(RenderTest, PlanJsonIsThePlanResultMessageInTheProtoJsonMapping) {
  const std::string text = PlanJson(SamplePlan());
  const json j = json::parse(text);
  std::set<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.insert(k);
  // Every field of the message, at its default too.
  EXPECT_EQ(keys, (std::set<std::string>{"ranked", "candidates_considered", "feasible",
                                         "elapsed_ms", "rejected", "rejected_total",
                                         "rejected_reasons"}));
  const json& r = j["ranked"][0];
  EXPECT_EQ(r["config"]["recompute"], "selective");
  EXPECT_EQ(r["config"]["vp"], "2");  // int64 as a decimal string
  EXPECT_EQ(r["config"]["overlap_grad_reduce"], true);
  EXPECT_EQ(r["config"]["split_counts_embedding_and_loss"], false);
  EXPECT_EQ(r["source"], "modelled");
  // Bytes become GiB; the peak is the sum of the parts.
  EXPECT_DOUBLE_EQ(r["memory"]["peak_gib"].get<double>(), 50.5);
  EXPECT_DOUBLE_EQ(r["memory"]["activations"].get<double>(), 40);
  EXPECT_DOUBLE_EQ(r["time"]["pp_bubble"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(r["time_to_train_days"].get<double>(), 12.25);
  EXPECT_EQ(j["ranked"][1]["time_to_train_days"], 0);
  EXPECT_FALSE(j["ranked"][1]["fits"].get<bool>());
  EXPECT_EQ(j["candidates_considered"], "4321");
  EXPECT_EQ(j["rejected"][0]["config"]["tp"], "3");
  EXPECT_EQ(j["rejected_reasons"][0]["reason"],
            "tp must divide model.num_attention_heads, and more, \"quoted\"");

  // It parses strictly as the wire message and prints back to the same bytes.
  v1::PlanResult proto;
  google::protobuf::util::JsonParseOptions strict;
  strict.ignore_unknown_fields = false;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(text, &proto, strict).ok());
  EXPECT_EQ(server::WireJson(proto), text);
}

TEST(RenderTest, PlanJsonAndResultsJsonPrintTheSameRankedConfig) {
  // `plan --json` prints the planner's result; `results --json` prints what the coordinator
  // stored (ToProto, serialized, read back) inside a JobResults.
  absl::StatusOr<JobSpec> spec = JobSpecFromJson(json::parse(R"({
    "model": {"preset": "llama3.1-405b"},
    "training": {"seq_length": 8192, "global_batch_size": 512, "total_tokens": 1000000000},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 1024},
    "search": {"tp": [8], "pp": [8], "vp": [8], "top_k": 3}})"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<PlanResult> plan = Plan(*spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->ranked.empty());

  v1::JobResults stored;
  *stored.mutable_plan() = server::ToProto(*plan);
  v1::JobResults served;
  ASSERT_TRUE(served.ParseFromString(stored.SerializeAsString()));

  const std::string from_plan = PlanJson(*plan);
  EXPECT_EQ(server::WireJson(served.plan()), from_plan);
  const json planned = json::parse(from_plan);
  const json results = json::parse(server::WireJson(served));
  ASSERT_EQ(planned["ranked"].size(), results["plan"]["ranked"].size());
  for (size_t i = 0; i < planned["ranked"].size(); ++i) {
    EXPECT_EQ(planned["ranked"][i].dump(), results["plan"]["ranked"][i].dump());
  }
  // The pipeline split flag of L = 126 over pp*vp = 64 chunks is in both.
  EXPECT_EQ(planned["ranked"][0]["config"]["split_counts_embedding_and_loss"], true);
  // `estimate --json` prints the RankedConfig message the same way.
  EXPECT_EQ(json::parse(EstimateJson(plan->ranked[0])).dump(), planned["ranked"][0].dump());
}

}  // namespace
}  // namespace paratune::client
