// The verify stage's placement of ranks on workers, its tasks and its Verification.
#include "server/verify_plan.h"

#include <algorithm>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "server/convert_layout.h"

namespace paratune::server {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

VerifyHost Cpu(const std::string& id, int64_t devices, double memory_gib = 64) {
  return {id, "cpu", devices, static_cast<int64_t>(memory_gib * kGiB)};
}

std::vector<VerifyPart> Parts(std::initializer_list<std::pair<int64_t, int64_t>> p) {
  std::vector<VerifyPart> out;
  for (auto [first, count] : p) out.push_back({first, count});
  return out;
}

TEST(PlaceVerifyRun, OneWorkerThatHoldsTheLayoutRunsItAlone) {
  VerifyPlacement p = PlaceVerifyRun(2, 1 * kGiB, {Cpu("a", 2), Cpu("b", 2)});
  EXPECT_EQ(p.parts, Parts({{0, 2}}));
  EXPECT_TRUE(p.reason.empty());
  // The larger worker is picked over splitting.
  p = PlaceVerifyRun(4, 1 * kGiB, {Cpu("a", 2), Cpu("b", 4)});
  EXPECT_EQ(p.parts, Parts({{0, 4}}));
}

TEST(PlaceVerifyRun, ALayoutLargerThanAnyWorkerIsSplitIntoWorkerSizedGroups) {
  EXPECT_EQ(PlaceVerifyRun(4, kGiB, {Cpu("a", 2), Cpu("b", 2)}).parts, Parts({{0, 2}, {2, 2}}));
  // World 8 over four 2-device workers: four parts of two consecutive ranks.
  EXPECT_EQ(PlaceVerifyRun(8, kGiB, {Cpu("a", 2), Cpu("b", 2), Cpu("c", 2), Cpu("d", 2)}).parts,
            Parts({{0, 2}, {2, 2}, {4, 2}, {6, 2}}));
  // 3 devices do not divide world 4; groups of 2 on the two workers do.
  EXPECT_EQ(PlaceVerifyRun(4, kGiB, {Cpu("a", 3), Cpu("b", 3)}).parts, Parts({{0, 2}, {2, 2}}));
  // World 6 on workers of 4 and 2 devices: groups of 2 need three workers; of 3, two
  // workers with 3 devices (there is one): no equal split exists.
  VerifyPlacement p = PlaceVerifyRun(6, kGiB, {Cpu("a", 4), Cpu("b", 2)});
  EXPECT_TRUE(p.parts.empty());
  EXPECT_EQ(p.reason,
            "needs 6 ranks in equal groups of consecutive ranks, one group per worker; "
            "workers offer 4 + 2");
}

TEST(PlaceVerifyRun, TooFewDevicesOrTooLittleMemorySaySo) {
  VerifyPlacement p = PlaceVerifyRun(8, kGiB, {Cpu("a", 2), Cpu("b", 2)});
  EXPECT_TRUE(p.parts.empty());
  EXPECT_EQ(p.reason, "needs 8 ranks, workers offer 4");
  EXPECT_EQ(PlaceVerifyRun(2, kGiB, {}).reason, "needs 2 ranks, workers offer 0");
  // 3 GiB per rank on 4 GiB hosts: one rank per worker fits, so world 2 splits in two...
  EXPECT_EQ(PlaceVerifyRun(2, 3 * kGiB, {Cpu("a", 2, 4), Cpu("b", 2, 4)}).parts,
            Parts({{0, 1}, {1, 1}}));
  // ...but world 4 does not fit anywhere.
  p = PlaceVerifyRun(4, 3 * kGiB, {Cpu("a", 2, 4), Cpu("b", 2, 4)});
  EXPECT_TRUE(p.parts.empty());
  EXPECT_EQ(p.reason,
            "needs 4 ranks of 3.00 GiB (predicted peak), workers have memory for 2 of their 4");
  // A CUDA worker's ranks have a device each: 8 ranks of 50 GiB fit on 8 × 80 GB devices
  // (not in its 64 GiB of host memory), 90 GiB per rank on none.
  const VerifyHost gpu{"g", "cuda", 8, static_cast<int64_t>(64 * kGiB),
                       static_cast<int64_t>(80 * kGiB)};
  p = PlaceVerifyRun(8, 50 * kGiB, {gpu}, "bf16");
  EXPECT_EQ(p.parts, Parts({{0, 8}}));
  EXPECT_EQ(p.backend, "cuda");
  EXPECT_EQ(PlaceVerifyRun(2, kGiB, {Cpu("a", 2)}).backend, "cpu");
  p = PlaceVerifyRun(1, 90 * kGiB, {gpu}, "bf16");
  EXPECT_TRUE(p.parts.empty());
  EXPECT_EQ(p.reason,
            "needs 1 ranks of 90.00 GiB (predicted peak), workers have memory for 0 of their 8");
  // 16-bit training needs CUDA workers; an fp32 spec prefers the CPU workers it is given.
  p = PlaceVerifyRun(1, kGiB, {Cpu("a", 2)}, "bf16");
  EXPECT_TRUE(p.parts.empty());
  EXPECT_EQ(p.reason,
            "kernels/training trains bf16 on CUDA workers only; the 1 registered worker(s) are "
            "CPU workers");
  EXPECT_EQ(PlaceVerifyRun(2, kGiB, {gpu, Cpu("a", 2)}, "bf16").parts, Parts({{0, 2}}));
  EXPECT_EQ(PlaceVerifyRun(4, kGiB, {Cpu("a", 2), gpu}, "fp32").reason,
            "needs 4 ranks, workers offer 2");
}

JobSpec TinySpec() {
  JobSpec s;
  s.model.num_layers = 4;
  s.model.hidden_size = 64;
  s.model.num_attention_heads = 4;
  s.model.vocab_size = 200;
  s.training.seq_length = 32;
  s.training.global_batch_size = 8;
  s.training.precision = Precision::kFp32;
  s.training.flash_attention = false;
  s.cluster.gpu = "cpu";
  return s;
}

v1::RankedConfig Ranked(int64_t tp, int64_t pp, int64_t dp, int64_t mb) {
  v1::RankedConfig r;
  r.set_rank(3);
  ParallelConfig layout;
  layout.tp = tp;
  layout.pp = pp;
  layout.dp = dp;
  layout.micro_batch_size = mb;
  layout.recompute = Recompute::kSelective;
  *r.mutable_config() = ToProto(layout);
  r.set_iteration_time_s(0.25);
  r.mutable_memory()->set_peak_gib(0.5);
  return r;
}

TEST(MakeVerifyTask, CarriesTheLayoutTheModelAndThePart) {
  VerifyRunOptions o;
  o.steps = 3;
  o.rendezvous_timeout_ms = 5000;
  const absl::StatusOr<v1::VerifyTask> made =
      MakeVerifyTask(TinySpec(), Ranked(2, 1, 2, 2), {2, 2}, o, "ns-1");
  ASSERT_TRUE(made.ok()) << made.status();
  const v1::VerifyTask& t = *made;
  EXPECT_EQ(t.world_size(), 4);
  EXPECT_EQ(t.first_rank(), 2);
  EXPECT_EQ(t.rank_count(), 2);
  EXPECT_EQ(t.rendezvous_namespace(), "ns-1");
  EXPECT_EQ(t.rendezvous_timeout_ms(), 5000);
  // 8 sequences / (mb 2 · dp 2) = 2 micro-batches per DP rank.
  EXPECT_EQ(t.num_micro_batches(), 2);
  // Vocabulary 200 padded to a multiple of 128 · tp = 256.
  EXPECT_EQ(t.shape().vocab_size(), 256);
  // Defaults of the model: g = a, f = 4h.
  EXPECT_EQ(t.shape().num_query_groups(), 4);
  EXPECT_EQ(t.shape().ffn_hidden_size(), 256);
  EXPECT_EQ(t.parallel().recompute(), "selective");
  EXPECT_EQ(t.steps(), 3);
  EXPECT_EQ(t.layout_rank(), 3);
  EXPECT_EQ(t.dtype(), "fp32");
  EXPECT_FALSE(t.dropout());
  JobSpec with_dropout = TinySpec();
  with_dropout.training.dropout = true;
  EXPECT_TRUE(MakeVerifyTask(with_dropout, Ranked(2, 1, 2, 2), {2, 2}, o, "ns-1")->dropout());
  EXPECT_FALSE(t.tie_embeddings());
  JobSpec tied = TinySpec();
  tied.model.tie_embeddings = true;
  EXPECT_TRUE(MakeVerifyTask(tied, Ranked(2, 1, 2, 2), {2, 2}, o, "ns-1")->tie_embeddings());
  // A learned position table where the model counts one (GPT presets: 2048 rows), none
  // for RoPE or for a spec built in code without max_position_embeddings (the model counts
  // no rows then; a spec read from JSON has seq_length rows there).
  EXPECT_EQ(t.position_rows(), 0);
  JobSpec learned = TinySpec();
  learned.model.position_embedding = PositionEmbedding::kLearned;
  learned.model.max_position_embeddings = 2048;
  EXPECT_EQ(MakeVerifyTask(learned, Ranked(2, 1, 2, 2), {2, 2}, o, "ns-1")->position_rows(), 2048);
  learned.model.position_embedding = PositionEmbedding::kRope;
  EXPECT_EQ(MakeVerifyTask(learned, Ranked(2, 1, 2, 2), {2, 2}, o, "ns-1")->position_rows(), 0);
  // A sliding window and which layers skip it: the trainer runs them (nothing refused).
  EXPECT_EQ(t.attention_window(), 0);
  JobSpec windowed = TinySpec();
  windowed.model.sliding_window = 16;
  windowed.model.window_attn_skip_freq = 2;
  EXPECT_EQ(VerifyUnsupportedReason(windowed, Ranked(2, 1, 2, 2).config()), "");
  const absl::StatusOr<v1::VerifyTask> w =
      MakeVerifyTask(windowed, Ranked(2, 1, 2, 2), {2, 2}, o, "ns-1");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->attention_window(), 16);
  EXPECT_EQ(w->window_attn_skip_freq(), 2);
  // A part that holds every rank meets in process: no namespace.
  EXPECT_EQ(MakeVerifyTask(TinySpec(), Ranked(1, 1, 2, 1), {0, 2}, o, "ns-1")
                ->rendezvous_namespace(),
            "");
}

TEST(MakeVerifyTask, CarriesEveryLayoutFieldAndRefusesALayoutThatIsNotOne) {
  ParallelConfig layout;
  layout.tp = 2;
  layout.dp = 2;
  layout.micro_batch_size = 2;
  layout.split_counts_embedding_and_loss = true;
  layout.overlap_grad_reduce = false;
  layout.tp_comm_overlap = true;
  layout.sequence_parallel = true;
  layout.overlap_p2p_comm = false;
  v1::RankedConfig r = Ranked(2, 1, 2, 2);
  *r.mutable_config() = ToProto(layout);
  absl::StatusOr<v1::VerifyTask> t = MakeVerifyTask(TinySpec(), r, {0, 4}, {}, "ns-1");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(ParallelConfigFromProto(t->parallel()).value(), layout);
  EXPECT_EQ(t->world_size(), 4);

  r.mutable_config()->set_recompute("sometimes");
  EXPECT_EQ(MakeVerifyTask(TinySpec(), r, {0, 4}, {}, "ns-1").status().message(),
            "recompute: unknown recompute 'sometimes' (expected none, selective, full)");
  *r.mutable_config() = ToProto(layout);
  r.mutable_config()->set_dp(0);
  EXPECT_EQ(MakeVerifyTask(TinySpec(), r, {0, 4}, {}, "ns-1").status().message(),
            "dp (0) must be >= 1");
}

TEST(VerifyUnsupportedReason, NamesWhatTheTrainerCannotDo) {
  JobSpec s = TinySpec();
  EXPECT_EQ(VerifyUnsupportedReason(s, Ranked(1, 1, 2, 1).config()), "");
  s.training.precision = Precision::kBf16;
  EXPECT_EQ(VerifyUnsupportedReason(s, Ranked(1, 1, 2, 1).config()), "");
  s.training.precision = Precision::kFp8;
  EXPECT_EQ(VerifyUnsupportedReason(s, Ranked(1, 1, 2, 1).config()),
            "kernels/training trains fp32, bf16 or fp16; the spec's precision is fp8");
  s = TinySpec();
  v1::ParallelConfig cp = Ranked(1, 1, 1, 1).config();
  cp.set_cp(2);
  EXPECT_EQ(VerifyUnsupportedReason(s, cp),
            "context parallelism (cp 2) is not implemented by kernels/training");
}

JobSpec TinyMoeSpec() {
  JobSpec s = TinySpec();
  s.model.num_experts = 8;
  s.model.moe_router_topk = 2;
  s.model.moe_ffn_hidden_size = 32;
  s.model.num_shared_experts = 1;
  s.model.first_k_dense_layers = 1;
  s.model.moe_layer_freq = 2;
  s.training.moe_routing = MoeRouting::kDropless;
  return s;
}

v1::RankedConfig RankedMoe(int64_t tp, int64_t dp, int64_t ep, int64_t etp) {
  ParallelConfig layout;
  layout.tp = tp;
  layout.dp = dp;
  layout.ep = ep;
  layout.etp = etp;
  layout.sequence_parallel = tp > 1;
  layout.micro_batch_size = 1;
  v1::RankedConfig r = Ranked(tp, 1, dp, 1);
  *r.mutable_config() = ToProto(layout);
  return r;
}

TEST(MakeVerifyTask, CarriesTheExpertsAndWhichLayersHoldThem) {
  const absl::StatusOr<v1::VerifyTask> t =
      MakeVerifyTask(TinyMoeSpec(), RankedMoe(2, 2, 2, 1), {0, 4}, {}, "ns-1");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->has_moe());
  EXPECT_EQ(t->moe().hidden_size(), 64);
  EXPECT_EQ(t->moe().num_experts(), 8);
  EXPECT_EQ(t->moe().moe_router_topk(), 2);
  EXPECT_EQ(t->moe().moe_ffn_hidden_size(), 32);
  EXPECT_EQ(t->moe().num_shared_experts(), 1);
  // A shared expert's width defaults to a routed expert's.
  EXPECT_EQ(t->moe().shared_expert_ffn_hidden_size(), 32);
  EXPECT_EQ(t->moe().routing(), "dropless");
  EXPECT_EQ(t->first_k_dense_layers(), 1);
  EXPECT_EQ(t->moe_layer_freq(), 2);
  EXPECT_EQ(t->parallel().ep(), 2);
  EXPECT_EQ(t->parallel().etp(), 1);
  // A dense model carries none.
  EXPECT_FALSE(MakeVerifyTask(TinySpec(), Ranked(1, 1, 2, 1), {0, 2}, {}, "")->has_moe());
}

TEST(VerifyUnsupportedReason, NamesWhatTheTrainerCannotDoWithExperts) {
  JobSpec s = TinyMoeSpec();
  EXPECT_EQ(VerifyUnsupportedReason(s, RankedMoe(2, 2, 2, 1).config()), "");
  EXPECT_EQ(VerifyUnsupportedReason(s, RankedMoe(2, 2, 2, 2).config()), "");
  EXPECT_EQ(VerifyUnsupportedReason(s, RankedMoe(4, 1, 1, 2).config()),
            "kernels/training splits experts over etp 1 or tp (4); the layout's etp is 2");
  v1::ParallelConfig flex = RankedMoe(1, 2, 2, 1).config();
  flex.set_moe_token_dispatcher("flex");
  EXPECT_EQ(VerifyUnsupportedReason(s, flex),
            "kernels/training dispatches tokens by all-to-all; the layout's dispatcher is flex");
  s.training.precision = Precision::kBf16;  // CUDA workers
  EXPECT_EQ(VerifyUnsupportedReason(s, RankedMoe(1, 2, 2, 1).config()), "");
  s.training.moe_routing = MoeRouting::kCapacity;
  s.training.moe_capacity_factor = 1.25;
  EXPECT_EQ(VerifyUnsupportedReason(s, RankedMoe(1, 2, 2, 1).config()),
            "kernels/training drops capacity-routed assignments on CPU workers (fp32) only; the "
            "spec's precision is bf16");
  s = TinyMoeSpec();
  s.model.mtp_layers = 1;
  EXPECT_EQ(VerifyUnsupportedReason(s, RankedMoe(1, 2, 2, 1).config()),
            "kernels/training has no multi-token-prediction layers (mtp_layers 1)");
  s = TinyMoeSpec();
  s.model.attention = AttentionType::kMla;
  EXPECT_EQ(VerifyUnsupportedReason(s, RankedMoe(1, 2, 2, 1).config()),
            "kernels/training runs multi-head or grouped-query attention; the model's "
            "attention is mla");
}

v1::VerifyResult Part(int64_t first, std::vector<int64_t> peaks) {
  v1::VerifyResult r;
  r.set_first_rank(first);
  for (int64_t p : peaks) r.add_peak_bytes_per_rank(p);
  for (double s : {0.9, 0.2, 0.4, 0.3}) r.add_step_seconds(s);
  r.set_median_iteration_s(0.3);
  for (double l : {5.5, 5.4, 5.2, 5.0}) r.add_losses(l);
  return r;
}

TEST(VerificationFromParts, MergesThePartsRankByRank) {
  const v1::RankedConfig r = Ranked(2, 1, 2, 2);
  absl::StatusOr<v1::Verification> v = VerificationFromParts(
      TinySpec(), r, 4, {Part(2, {3 << 20, 5 << 20}), Part(0, {4 << 20, 2 << 20})});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->status(), "verified");
  EXPECT_DOUBLE_EQ(v->measured_iteration_time_s(), 0.3);
  EXPECT_DOUBLE_EQ(v->predicted_iteration_time_s(), 0.25);
  EXPECT_DOUBLE_EQ(v->predicted_peak_gib(), 0.5);
  ASSERT_EQ(v->measured_peak_gib_per_rank_size(), 4);
  const std::vector<double> mib = {4, 2, 3, 5};
  for (int i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(v->measured_peak_gib_per_rank(i), mib[i] / 1024.0) << i;
  }
  EXPECT_DOUBLE_EQ(v->measured_peak_gib(), 5.0 / 1024.0);
  ASSERT_EQ(v->measured_losses_size(), 4);
  EXPECT_DOUBLE_EQ(v->measured_losses(3), 5.0);
  // A rank missing or reported twice is an error, not a silent partial figure.
  EXPECT_FALSE(VerificationFromParts(TinySpec(), r, 4, {Part(0, {1, 2})}).ok());
  EXPECT_FALSE(
      VerificationFromParts(TinySpec(), r, 4, {Part(0, {1, 2, 3}), Part(2, {4, 5})}).ok());
}

// The memory error compares the measured tracking-allocator peak with the prediction on
// the same footing. A bf16 layout on an H100, by hand: weights 2, FP32 main grads 4,
// optimizer 12, activations 10 GiB; other = transient 3 + workspace 2.5 + 10 % of
// (10 + 3) = 6.8 GiB; peak 34.8 GiB. The trainer's allocator sees weights 2, its bf16
// gradients 2, optimizer 12, activations 10 and the transient 3: 29 GiB. On the "cpu"
// device in FP32 there is nothing to take off: the whole peak.
TEST(VerificationFromParts, TrackedPeakDropsTheFrameworkAndUsesTheTrainersGradientsAndLoss) {
  v1::RankedConfig r = Ranked(1, 1, 1, 1);
  v1::MemoryBreakdown* m = r.mutable_memory();
  m->set_weights(2);
  m->set_gradients(4);
  m->set_optimizer(12);
  m->set_activations(10);
  m->set_other(6.8);
  m->set_peak_gib(34.8);
  JobSpec gpu = TinySpec();
  gpu.cluster.gpu = "h100-sxm-80gb";
  JobSpec gpu_fp32 = gpu;
  gpu.training.precision = Precision::kBf16;
  gpu_fp32.training.precision = Precision::kFp32;
  const auto tracked = [&r](const JobSpec& spec) {
    absl::StatusOr<v1::Verification> v = VerificationFromParts(spec, r, 1, {Part(0, {1 << 30})});
    EXPECT_TRUE(v.ok()) << v.status();
    EXPECT_DOUBLE_EQ(v.ok() ? v->predicted_peak_gib() : 0, 34.8);
    return v.ok() ? v->predicted_tracked_peak_gib() : -1.0;
  };
  EXPECT_NEAR(tracked(gpu), 29.0, 1e-12);
  // FP32 on the same GPU keeps FP32 gradients, as Megatron does: only the framework goes.
  EXPECT_NEAR(tracked(gpu_fp32), 31.0, 1e-12);
  EXPECT_NEAR(tracked(TinySpec()), 34.8, 1e-12);
  // 1.5 GiB of the transient are the loss buffers at Megatron's 6 bytes per logit. The
  // trainer holds the logits and their gradient in the training dtype: 4 bytes in bf16
  // (1.5·4/6 = 1.0 GiB, so 0.5 GiB less), 8 in fp32 (2.0 GiB, 0.5 GiB more).
  m->set_loss_buffers(1.5);
  EXPECT_NEAR(tracked(gpu), 28.5, 1e-12);
  EXPECT_NEAR(tracked(gpu_fp32), 31.5, 1e-12);
  EXPECT_NEAR(tracked(TinySpec()), 35.3, 1e-12);
}

// A ranked layout of `rank` whose verification measured `steps` (the first untimed) with
// the median of the rest as its iteration time; an empty `steps` leaves it unverified.
v1::RankedConfig VerifiedAt(int64_t rank, std::vector<double> steps) {
  v1::RankedConfig r;
  r.set_rank(rank);
  if (steps.empty()) {
    r.mutable_verification()->set_status("not verified: needs 8 ranks, workers offer 4");
    return r;
  }
  v1::Verification* v = r.mutable_verification();
  v->set_status("verified");
  for (double s : steps) v->add_measured_step_seconds(s);
  std::vector<double> timed(steps.begin() + 1, steps.end());
  std::sort(timed.begin(), timed.end());
  v->set_measured_iteration_time_s(timed[timed.size() / 2]);
  return r;
}

v1::PlanResult Plan(std::vector<v1::RankedConfig> ranked) {
  v1::PlanResult p;
  for (auto& r : ranked) *p.add_ranked() = std::move(r);
  return p;
}

TEST(SummarizeVerification, ThePredictedBestMeasuringFastestConfirmsTheRanking) {
  // Medians 1.0, 1.2 and 1.1 s: rank 1 fastest; of the pairs (1,2), (1,3), (2,3), the last
  // is measured out of order. Rank 4 was not verified and takes no part.
  const std::optional<v1::VerificationSummary> s = SummarizeVerification(
      Plan({VerifiedAt(1, {3.0, 1.0, 0.9, 1.1}), VerifiedAt(2, {3.0, 1.2, 1.2, 1.3}),
            VerifiedAt(3, {3.0, 1.1, 1.0, 1.2}), VerifiedAt(4, {})}));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->verified(), 3);
  EXPECT_EQ(s->predicted_best_rank(), 1);
  EXPECT_EQ(s->measured_best_rank(), 1);
  EXPECT_DOUBLE_EQ(s->regret_pct(), 0.0);
  EXPECT_EQ(s->pairs(), 3);
  EXPECT_EQ(s->pairs_in_order(), 2);
  EXPECT_FALSE(s->separated());
  EXPECT_EQ(s->verdict(),
            "confirmed: rank 1 measured fastest of the 3 verified layouts; 2 of 3 pairs in the "
            "predicted order");
}

TEST(SummarizeVerification, ABetterLayoutIsATieUnlessEveryStepOfItWasFaster) {
  // Rank 2's median 0.95 s against rank 1's 1.0 s: 5.26 % regret. Its slowest timed step
  // (1.02 s; the untimed 5.0 s first step does not count) overlaps rank 1's fastest (0.98 s).
  std::optional<v1::VerificationSummary> s = SummarizeVerification(
      Plan({VerifiedAt(1, {3.0, 1.0, 0.98, 1.05}), VerifiedAt(2, {5.0, 0.95, 0.9, 1.02})}));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->measured_best_rank(), 2);
  EXPECT_NEAR(s->regret_pct(), 100.0 * (1.0 / 0.95 - 1.0), 1e-9);
  EXPECT_EQ(s->pairs_in_order(), 0);
  EXPECT_FALSE(s->separated());
  EXPECT_EQ(s->verdict(),
            "a tie at this run's resolution: rank 2 measured fastest; rank 1 measured 5.3 % "
            "slower, within the steps' spread (their step times overlap); 0 of 1 pairs in the "
            "predicted order");
  // Every step of rank 2 below every step of rank 1: the ranking is wrong, not noisy.
  s = SummarizeVerification(
      Plan({VerifiedAt(1, {3.0, 1.0, 0.98, 1.05}), VerifiedAt(2, {5.0, 0.95, 0.9, 0.97})}));
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->separated());
  EXPECT_EQ(s->verdict().substr(0, 40), "not confirmed: rank 2 measured fastest; ");
}

TEST(SummarizeVerification, NothingVerifiedGivesNoSummaryAndOneLayoutNothingToCompare) {
  EXPECT_FALSE(SummarizeVerification(Plan({VerifiedAt(1, {}), VerifiedAt(2, {})})).has_value());
  // The best verified layout is the predicted best even when rank 1 was not verified.
  const std::optional<v1::VerificationSummary> s =
      SummarizeVerification(Plan({VerifiedAt(1, {}), VerifiedAt(2, {2.0, 1.0})}));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->verified(), 1);
  EXPECT_EQ(s->predicted_best_rank(), 2);
  EXPECT_EQ(s->pairs(), 0);
  EXPECT_EQ(s->verdict(), "one layout verified (rank 2): nothing to compare it with");
}

}  // namespace
}  // namespace paratune::server
