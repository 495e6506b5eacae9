// The serving kernels against their references: the training layer's forward, full
// recomputation, TP = 1, a contiguous cache, one-shot prefill and fp32 weights.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "kernels/hash_random.h"
#include "kernels/serving/serving_layer.h"
#include "kernels/serving/serving_ops.h"
#include "kernels/transformer_layer.h"
#include "tests/kernels/serving_harness.h"

namespace paratune::kernels::serving {
namespace {

using testing::Prompt;
using testing::RunOnEachRank;
using testing::RunOnRanks;
using testing::SmallExpertModel;
using testing::SmallModel;
using testing::ToleranceRatio;

// A schedule of steps: each entry (seq, n) is a prompt chunk of n tokens (n > 0) or a
// decode of one token (n = 0). Sequences sample after their prompt's last chunk and at
// every decode; the result is every sequence's sampled logits, sequence by sequence.
struct Plan {
  std::map<int64_t, int64_t> prompt_len;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> steps;
};

// With `free_window`, each step's sequences return the blocks left of their windows, as the
// serving loop does.
// A pipeline's stages run each step in order (StageForward, then the last stage's Sample);
// one model of pp 1 runs Step.
absl::StatusOr<std::vector<float>> DriveStages(const std::vector<ServingModel*>& stages,
                                               const Plan& plan, bool free_window = false) {
  const int64_t V = stages.front()->config().shape.vocab_size;
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, int64_t> done;
  std::map<int64_t, std::vector<float>> logits;
  for (const auto& [seq, len] : plan.prompt_len) tokens[seq] = Prompt(seq, len, V);
  for (const auto& step : plan.steps) {
    std::vector<SeqChunk> chunks;
    std::vector<int32_t> ids;
    for (const auto& [seq, n] : step) {
      SeqChunk c;
      c.seq = seq;
      c.start = done[seq];
      c.num_tokens = n > 0 ? n : 1;
      c.sample = n == 0 || done[seq] + n == plan.prompt_len.at(seq);
      for (int64_t i = 0; i < c.num_tokens; ++i) ids.push_back(tokens[seq][c.start + i]);
      done[seq] += c.num_tokens;
      chunks.push_back(c);
    }
    absl::StatusOr<StepOutput> out;
    if (stages.size() == 1) {
      out = stages.front()->Step(ids, chunks, /*return_logits=*/true);
    } else {
      absl::StatusOr<Tensor> x = stages.front()->StageForward(ids, nullptr, chunks);
      for (size_t s = 1; s < stages.size() && x.ok(); ++s) {
        x = stages[s]->StageForward({}, &*x, chunks);
      }
      if (!x.ok()) return x.status();
      out = stages.back()->Sample(*x, chunks, /*return_logits=*/true);
    }
    if (!out.ok()) return out.status();
    for (ServingModel* stage : stages) {
      for (const SeqChunk& c : chunks) {
        if (free_window) stage->cache().FreeOutsideWindow(c.seq);
      }
    }
    int64_t s = 0;
    for (const SeqChunk& c : chunks) {
      if (!c.sample) continue;
      tokens[c.seq].push_back(out->next_tokens[s]);
      logits[c.seq].insert(logits[c.seq].end(), out->logits.begin() + s * V,
                           out->logits.begin() + (s + 1) * V);
      ++s;
    }
  }
  std::vector<float> all;
  for (const auto& [seq, l] : logits) all.insert(all.end(), l.begin(), l.end());
  for (const auto& [seq, t] : tokens) all.insert(all.end(), t.begin(), t.end());
  return all;
}

absl::StatusOr<std::vector<float>> Drive(ServingModel& model, const Plan& plan,
                                         bool free_window = false) {
  return DriveStages({&model}, plan, free_window);
}

// Three prompts of different lengths prefilled in one step, then five decode steps.
Plan OneShotPlan() {
  Plan p;
  p.prompt_len = {{0, 7}, {1, 12}, {2, 3}};
  p.steps.push_back({{0, 7}, {1, 12}, {2, 3}});
  for (int i = 0; i < 5; ++i) p.steps.push_back({{0, 0}, {1, 0}, {2, 0}});
  return p;
}

// Sequence 1's prompt in chunks of 5, 5, 2 mixed with the others' decodes.
Plan ChunkedPlan() {
  Plan p;
  p.prompt_len = {{0, 7}, {1, 12}, {2, 3}};
  p.steps.push_back({{0, 7}, {2, 3}, {1, 5}});
  p.steps.push_back({{0, 0}, {2, 0}, {1, 5}});
  p.steps.push_back({{0, 0}, {2, 0}, {1, 2}});
  for (int i = 0; i < 3; ++i) p.steps.push_back({{0, 0}, {2, 0}, {1, 0}});
  for (int i = 0; i < 2; ++i) p.steps.push_back({{1, 0}});
  return p;
}

absl::StatusOr<std::vector<float>> RunPlan(const ServingConfig& c, const Plan& plan,
                                           uint64_t shuffle = 0, bool free_window = false) {
  return RunOnRanks(
      c, [&](ServingModel& m) { return Drive(m, plan, free_window); }, shuffle);
}

TEST(ServingModel, DecodeWithKvCacheEqualsRecomputingTheSequence) {
  const ServingConfig c = SmallModel(1);
  constexpr int64_t kPrompt = 9, kDecodes = 6;
  auto run = RunOnRanks(c, [&](ServingModel& m) -> absl::StatusOr<std::vector<float>> {
    const int64_t V = m.config().shape.vocab_size;
    std::vector<int32_t> seq = Prompt(0, kPrompt, V);
    std::vector<float> cached, recomputed;
    auto out = m.Step(seq, {{0, 0, kPrompt, true}}, true);
    if (!out.ok()) return out.status();
    seq.push_back(out->next_tokens[0]);
    for (int64_t k = 0; k < kDecodes; ++k) {
      out = m.Step({seq.back()}, {{0, static_cast<int64_t>(seq.size()) - 1, 1, true}}, true);
      if (!out.ok()) return out.status();
      cached.insert(cached.end(), out->logits.begin(), out->logits.end());
      // The same prefix recomputed from scratch as a new sequence.
      std::vector<int32_t> prefix(seq.begin(), seq.end());
      const int64_t id = 100 + k;
      auto ref = m.Step(prefix, {{id, 0, static_cast<int64_t>(prefix.size()), true}}, true);
      if (!ref.ok()) return ref.status();
      m.Release(id);
      recomputed.insert(recomputed.end(), ref->logits.begin(), ref->logits.end());
      seq.push_back(out->next_tokens[0]);
    }
    cached.insert(cached.end(), recomputed.begin(), recomputed.end());
    return cached;
  });
  ASSERT_TRUE(run.ok()) << run.status();
  const size_t half = run->size() / 2;
  ASSERT_EQ(half, static_cast<size_t>(kDecodes * c.shape.vocab_size));
  std::vector<float> cached(run->begin(), run->begin() + half),
      full(run->begin() + half, run->end());
  EXPECT_LE(ToleranceRatio(cached, full, 1e-5, 1e-4), 1.0);
}

// For every MLP activation (SwiGLU, GeGLU, GeLU, squared ReLU).
TEST(ServingModel, TensorParallel2And4EqualTp1) {
  for (Activation act :
       {Activation::kSwiglu, Activation::kGeglu, Activation::kGelu, Activation::kSquaredRelu}) {
    const auto model = [&](int64_t tp) {
      ServingConfig c = SmallModel(tp);
      c.shape.activation = act;
      return c;
    };
    auto ref = RunPlan(model(1), OneShotPlan());
    ASSERT_TRUE(ref.ok()) << ref.status();
    for (int64_t tp : {2, 4}) {
      auto got = RunPlan(model(tp), OneShotPlan());
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_LE(ToleranceRatio(*got, *ref, 1e-5, 1e-4), 1.0) << "tp " << tp << " " << ToString(act);
    }
  }
}

// Config `c` as pp stages on c.parallel.tp thread ranks (each rank holds one model per
// stage over its tp group, run in stage order), driven through `plan`: rank 0's result.
absl::StatusOr<std::vector<float>> RunPipelinePlan(ServingConfig c, int64_t pp, const Plan& plan,
                                                   bool free_window = false) {
  c.parallel.pp = pp;
  auto all = testing::RunRankBodies(static_cast<int>(c.parallel.tp), 1,
                                    [&](int, const ServingGroups& groups,
                                        Backend& backend) -> absl::StatusOr<std::vector<float>> {
                                      std::vector<std::unique_ptr<ServingModel>> models;
                                      std::vector<ServingModel*> stages;
                                      for (int64_t s = 0; s < pp; ++s) {
                                        ServingConfig sc = c;
                                        sc.stage = s;
                                        auto m = ServingModel::Create(sc, groups.context(&backend),
                                                                      /*shuffle_seed=*/s + 5);
                                        if (!m.ok()) return m.status();
                                        stages.push_back(m->get());
                                        models.push_back(*std::move(m));
                                      }
                                      return DriveStages(stages, plan, free_window);
                                    });
  if (!all.ok()) return all.status();
  return std::move((*all)[0]);
}

// Pipeline stages: 5 layers as stages of 3 + 2 and 2 + 2 + 1 layers (the first stage
// embeds, the last samples), at tp 1 and 2, with chunked prefill and a sliding window in
// every other layer (each stage's cache holds its layers' groups), give the one-stage
// model's logits and tokens; a middle stage has neither embedding nor output layer.
TEST(ServingModel, PipelineStagesEqualTheWholeModel) {
  for (int64_t tp : {1, 2}) {
    ServingConfig c = SmallModel(tp, /*layers=*/5);
    c.attention_window = 6;
    c.window_attn_skip_freq = 2;
    auto ref = RunPlan(c, ChunkedPlan(), 0, /*free_window=*/true);
    ASSERT_TRUE(ref.ok()) << ref.status();
    for (int64_t pp : {2, 3}) {
      auto got = RunPipelinePlan(c, pp, ChunkedPlan(), /*free_window=*/true);
      ASSERT_TRUE(got.ok()) << "tp " << tp << " pp " << pp << ": " << got.status();
      EXPECT_LE(ToleranceRatio(*got, *ref, 1e-5, 1e-4), 1.0) << "tp " << tp << " pp " << pp;
    }
  }
  ServingConfig c = SmallModel(1, 5);
  c.parallel.pp = 3;
  EXPECT_EQ(c.StageLayers(0), (std::pair<int64_t, int64_t>{0, 2}));
  EXPECT_EQ(c.StageLayers(1), (std::pair<int64_t, int64_t>{2, 4}));
  EXPECT_EQ(c.StageLayers(2), (std::pair<int64_t, int64_t>{4, 5}));
  c.stage = 1;
  auto backend = MakeCpuBackend(0, 1);
  auto self = MakeSelfCommunicator(*backend);
  auto middle = ServingModel::Create(c, ParallelContext{backend.get(), self.get(), nullptr});
  ASSERT_TRUE(middle.ok()) << middle.status();
  c.stage = 0;
  auto first = ServingModel::Create(c, ParallelContext{backend.get(), self.get(), nullptr});
  ASSERT_TRUE(first.ok());
  c.stage = 2;
  auto last = ServingModel::Create(c, ParallelContext{backend.get(), self.get(), nullptr});
  ASSERT_TRUE(last.ok());
  // The middle stage holds two layers' weights only: the first adds the embedding, the
  // last one layer, the final norm and the output layer.
  const int64_t h = 64, V = 96;
  EXPECT_EQ((*first)->weight_bytes() - (*middle)->weight_bytes(), V * h * 4);
  EXPECT_EQ((*middle)->cache().shape().num_layers, 2);
  EXPECT_EQ((*last)->cache().shape().num_layers, 1);
  EXPECT_FALSE((*middle)->Sample(Tensor(), {}, false).ok());
  EXPECT_FALSE((*middle)->Step({1}, {{0, 0, 1, true}}, false).ok());
  c.stage = 3;
  EXPECT_NE(c.Validate().message().find("stage (3) must be in [0, pp (3))"), std::string::npos);
  c.stage = 0;
  c.parallel.pp = 6;
  EXPECT_NE(c.Validate().message().find("pp (6) must be in [1, num_layers (5)]"),
            std::string::npos);
}

TEST(ServingModel, PagedCacheEqualsContiguousCache) {
  ServingConfig contiguous = SmallModel(2);
  contiguous.kv_block_size = 64;  // one block per sequence
  contiguous.num_kv_blocks = 4;
  auto ref = RunPlan(contiguous, OneShotPlan());
  ServingConfig paged = SmallModel(2);  // blocks of 4 tokens handed out in random order
  auto got = RunPlan(paged, OneShotPlan(), /*shuffle=*/77);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_LE(ToleranceRatio(*got, *ref, 1e-6, 1e-5), 1.0);
}

TEST(ServingModel, ChunkedPrefillInMixedStepsEqualsOneShotPrefill) {
  auto ref = RunPlan(SmallModel(2), OneShotPlan());
  auto got = RunPlan(SmallModel(2), ChunkedPlan());
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_LE(ToleranceRatio(*got, *ref, 1e-5, 1e-4), 1.0);
}

// The logits of a model `make(tp)` builds: TP 2 with a paged cache in random block order
// (`shuffle`) and chunked prefill equal the one-shot TP 1 run's, and the small dense model's
// differ from them.
void ExpectLayoutsAgreeAndDifferFromDense(const std::function<ServingConfig(int64_t)>& make,
                                          uint64_t shuffle) {
  auto ref = RunPlan(make(1), OneShotPlan());
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto tp2 = RunPlan(make(2), OneShotPlan(), shuffle);
  ASSERT_TRUE(tp2.ok()) << tp2.status();
  EXPECT_LE(ToleranceRatio(*tp2, *ref, 1e-5, 1e-4), 1.0);
  auto chunked = RunPlan(make(2), ChunkedPlan());
  ASSERT_TRUE(chunked.ok()) << chunked.status();
  EXPECT_LE(ToleranceRatio(*chunked, *ref, 1e-5, 1e-4), 1.0);
  auto dense = RunPlan(SmallModel(1), OneShotPlan());
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_GT(ToleranceRatio(*dense, *ref, 1e-5, 1e-4), 1.0);
}

// The first of two layers attends to a 5-key window (the second to the whole context):
// decodes read the window's blocks only, and TP 2, a paged cache in random block order and
// chunked prefill give the one-shot TP 1 run's logits; the window changes them.
TEST(ServingModel, SlidingWindowLayersEqualAcrossLayoutsAndDifferFromWholeContext) {
  const auto windowed = [](int64_t tp) {
    ServingConfig c = SmallModel(tp);
    c.attention_window = 5;
    c.window_attn_skip_freq = 2;
    return c;
  };
  ExpectLayoutsAgreeAndDifferFromDense(windowed, /*shuffle=*/77);
  ServingConfig bad = SmallModel(1);
  bad.attention_window = -1;
  EXPECT_FALSE(bad.Validate().ok());
}

// Returning the blocks left of each window after every step lets the same three sequences
// run in a pool that cannot hold their whole contexts (layer 0: window 5; layer 1: whole
// context; blocks of 4 tokens): 10 blocks per layer without freeing, 16 in the pool. The
// freed blocks are handed out again and overwritten (random block order), so a read of
// one would change the logits; they equal the run in a large pool.
TEST(ServingModel, FreeingBlocksLeftOfTheWindowKeepsTheLogits) {
  ServingConfig c = SmallModel(1);
  c.attention_window = 5;
  c.window_attn_skip_freq = 2;
  auto ref = RunPlan(c, OneShotPlan());
  ASSERT_TRUE(ref.ok()) << ref.status();
  c.num_kv_blocks = 8;  // x 2 layers / group size 1 = 16 shared blocks
  auto freed = RunPlan(c, OneShotPlan(), /*shuffle=*/91, /*free_window=*/true);
  ASSERT_TRUE(freed.ok()) << freed.status();
  EXPECT_LE(ToleranceRatio(*freed, *ref, 1e-6, 1e-5), 1.0);
  auto kept = RunPlan(c, OneShotPlan(), /*shuffle=*/91, /*free_window=*/false);
  EXPECT_EQ(kept.status().code(), absl::StatusCode::kResourceExhausted);
}

// The block bookkeeping by hand: 4 layers, the even ones windowed (window 6), blocks of 4
// tokens, 8 blocks per layer: groups of gcd(2, 2) = 2 layers (one whole-context, one
// windowed) sharing 2 pools of 8 x 4 / 2 = 16 blocks.
TEST(PagedKvCache, WindowedGroupsHoldTheirWindowAndFreeTheRest) {
  auto backend = MakeCpuBackend(0, 1);
  KvCacheShape shape;
  shape.num_layers = 4;
  shape.num_blocks = 8;
  shape.block_size = 4;
  shape.groups = 1;
  shape.head_dim = 2;
  shape.window = 6;
  shape.windowed = {true, false, true, false};
  auto cache = PagedKvCache::Create(*backend, shape);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->groups().group_size, 2);
  EXPECT_EQ(cache->groups().full_groups, 1);
  EXPECT_EQ(cache->groups().windowed_groups, 1);
  EXPECT_EQ(cache->free_blocks(), 16);
  // The same bytes as 8 blocks in each of 4 layers' pools.
  EXPECT_EQ(cache->bytes(), 4 * 8 * 4 * cache->bytes_per_token_per_layer());
  // A 10-token prompt: blocks 0-2 in both groups.
  EXPECT_EQ(cache->BlocksNeeded(0, 10), 6);
  ASSERT_TRUE(cache->Reserve(0, 10).ok());
  ASSERT_TRUE(cache->SetLength(0, 10).ok());
  EXPECT_EQ(cache->free_blocks(), 10);
  // Position 10 reads keys 5-10: the windowed group frees block 0 (positions 0-3) only.
  cache->FreeOutsideWindow(0);
  EXPECT_EQ(cache->free_blocks(), 11);
  EXPECT_EQ(cache->block_table(0, 0)[0], -1);
  EXPECT_GE(cache->block_table(0, 1)[0], 0);
  EXPECT_FALSE(cache->Holds(2, 0, 3));
  EXPECT_TRUE(cache->Holds(2, 0, 4));
  EXPECT_TRUE(cache->Holds(3, 0, 3));
  // Growing to 17 tokens: blocks 3 and 4 in each group.
  EXPECT_EQ(cache->BlocksNeeded(0, 17), 4);
  ASSERT_TRUE(cache->Reserve(0, 17).ok());
  ASSERT_TRUE(cache->SetLength(0, 17).ok());
  cache->FreeOutsideWindow(0);  // position 17 reads 12-17: blocks 1 and 2 go
  EXPECT_EQ(cache->free_blocks(), 16 - 5 - 2);
  cache->Release(0);
  EXPECT_EQ(cache->free_blocks(), 16);
  // A cached context of 30 tokens takes the 8 blocks of positions 0-30 in the
  // whole-context group and those of positions 25-30 (6 and 7) in the windowed one.
  ASSERT_TRUE(cache->ReserveContext(1, 30).ok());
  EXPECT_EQ(cache->free_blocks(), 16 - 8 - 2);
  EXPECT_EQ(cache->length(1), 30);
  EXPECT_EQ(cache->ReserveContext(1, 30).code(), absl::StatusCode::kFailedPrecondition);
  cache->Release(1);
  EXPECT_EQ(cache->free_blocks(), 16);
  shape.windowed = {true};
  EXPECT_FALSE(PagedKvCache::Create(*backend, shape).ok());
}

// A sequence's KV handed from one cache to another (disaggregated serving): every
// position of every layer reads back the same in the receiving cache, whose blocks are
// handed out in another random order; in a windowed cache the receiver holds the window's
// blocks only, with the sender's data. A receiver without the blocks takes nothing.
TEST(PagedKvCache, ExportImportMovesASequenceBetweenCaches) {
  auto backend = MakeCpuBackend(0, 1);
  for (bool windowed : {false, true}) {
    KvCacheShape shape;
    shape.num_layers = 2;
    shape.num_blocks = 8;
    shape.block_size = 4;
    shape.groups = 2;
    shape.head_dim = 3;
    shape.dtype = DType::kBF16;
    if (windowed) {
      shape.window = 6;
      shape.windowed = {true, false};
    }
    auto from = PagedKvCache::Create(*backend, shape, /*shuffle_seed=*/3);
    auto to = PagedKvCache::Create(*backend, shape, /*shuffle_seed=*/7);
    ASSERT_TRUE(from.ok() && to.ok());
    constexpr int64_t kLen = 13;
    const int64_t row = shape.groups * shape.head_dim;
    ASSERT_TRUE(from->Reserve(5, kLen).ok());
    std::vector<float> k(row), v(row);
    for (int64_t l = 0; l < shape.num_layers; ++l) {
      for (int64_t pos = 0; pos < kLen; ++pos) {
        for (int64_t i = 0; i < row; ++i) {
          k[i] = static_cast<float>(100 * l + pos + 0.25 * i);
          v[i] = -k[i];
        }
        from->Write(l, 5, pos, k.data(), v.data());
      }
    }
    ASSERT_TRUE(from->SetLength(5, kLen).ok());
    from->FreeOutsideWindow(5);
    auto kv = from->Export(5);
    ASSERT_TRUE(kv.ok()) << kv.status();
    EXPECT_EQ(kv->length, kLen);
    ASSERT_TRUE(to->Import(9, *kv).ok());
    EXPECT_EQ(to->length(9), kLen);
    int64_t compared = 0;
    for (int64_t l = 0; l < shape.num_layers; ++l) {
      for (int64_t pos = 0; pos < kLen; ++pos) {
        ASSERT_EQ(to->Holds(l, 9, pos), from->Holds(l, 5, pos)) << l << " " << pos;
        if (!to->Holds(l, 9, pos)) continue;
        std::vector<float> kf(shape.head_dim), vf(shape.head_dim), kt(shape.head_dim),
            vt(shape.head_dim);
        for (int64_t g = 0; g < shape.groups; ++g) {
          const int64_t b = pos / shape.block_size, first = pos % shape.block_size;
          from->ReadBlock(l, from->block_table(5, l)[b], g, first, 1, kf.data(), vf.data());
          to->ReadBlock(l, to->block_table(9, l)[b], g, first, 1, kt.data(), vt.data());
          EXPECT_EQ(kt, kf) << l << " " << pos << " " << g;
          EXPECT_EQ(vt, vf) << l << " " << pos << " " << g;
          ++compared;
        }
      }
    }
    // Whole context: 2 layers x 13 positions x 2 groups; windowed: layer 0 keeps 8-12.
    EXPECT_EQ(compared, windowed ? (13 + 5) * 2 : 2 * 13 * 2) << windowed;
    // A receiver whose blocks are taken refuses it and takes none.
    auto full = PagedKvCache::Create(*backend, shape);
    ASSERT_TRUE(full.ok());
    ASSERT_TRUE(full->ReserveContext(1, 8 * 4 - 2).ok());
    if (windowed) {  // the windowed layer holds 2 blocks of 16: 6 left, what 13 tokens take
      ASSERT_TRUE(full->ReserveContext(3, 8).ok());
    }
    const int64_t free = full->free_blocks();
    EXPECT_EQ(free, 0);
    EXPECT_EQ(full->Import(2, *kv).code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(full->free_blocks(), free);
    EXPECT_FALSE(full->contains(2));
  }
}

// Layer 1 of 2 is an expert layer (4 SwiGLU experts of 32, top-2, one shared expert):
// TP 2 (each expert split over the ranks, the outputs all-reduced), a paged cache in
// random block order and chunked prefill give the one-shot TP 1 run's logits; the experts
// change them; an expert block the layout cannot split is refused naming the field.
TEST(ServingModel, ExpertLayersEqualAcrossLayoutsAndDifferFromDense) {
  const auto experts = [](int64_t tp) {
    ServingConfig c = SmallExpertModel(tp);
    c.first_k_dense_layers = 1;
    return c;
  };
  ExpectLayoutsAgreeAndDifferFromDense(experts, /*shuffle=*/13);
  ServingConfig odd = experts(2);
  odd.moe->ffn_hidden = 33;
  const absl::Status s = odd.Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("ffn"), std::string::npos) << s.message();
}

// Expert parallelism folded into TP, as the engines serve it: every rank holds the batch,
// runs its share of the experts (ep of them, each split over tp / ep) and 1 / tp of the
// shared expert, and one all-reduce sums them. TP 2 EP 2, TP 4 EP 2 and TP 4 EP 4 give the
// one-shot TP 1 logits (a paged cache in random block order, then chunked prefill); an ep
// that does not divide tp, or one without experts, is refused naming the field.
TEST(ServingModel, ExpertParallelLayoutsGiveTheSingleRankLogits) {
  const auto experts = [](int64_t tp, int64_t ep) {
    ServingConfig c = SmallExpertModel(tp, ep);
    c.moe->normalize_topk = true;
    return c;
  };
  auto ref = RunPlan(experts(1, 1), OneShotPlan());
  ASSERT_TRUE(ref.ok()) << ref.status();
  for (auto [tp, ep] : {std::pair<int64_t, int64_t>{2, 2}, {4, 2}, {4, 4}}) {
    auto paged = RunPlan(experts(tp, ep), OneShotPlan(), /*shuffle=*/29);
    ASSERT_TRUE(paged.ok()) << paged.status();
    EXPECT_LE(ToleranceRatio(*paged, *ref, 1e-5, 1e-4), 1.0) << "tp " << tp << " ep " << ep;
    auto chunked = RunPlan(experts(tp, ep), ChunkedPlan());
    ASSERT_TRUE(chunked.ok()) << chunked.status();
    EXPECT_LE(ToleranceRatio(*chunked, *ref, 1e-5, 1e-4), 1.0) << "tp " << tp << " ep " << ep;
  }
  EXPECT_EQ(experts(4, 3).Validate().message(), "ep (3) must divide tp (4)");
  ServingConfig dense = SmallModel(2);
  dense.parallel.ep = 2;
  EXPECT_EQ(dense.Validate().message(), "ep (2) must be 1 without experts");
}

// One prompt of each sequence prefilled in one step, then five decode steps.
Plan OneShotPlanOf(const std::map<int64_t, int64_t>& prompts) {
  Plan p;
  p.prompt_len = prompts;
  p.steps.emplace_back(prompts.begin(), prompts.end());
  std::vector<std::pair<int64_t, int64_t>> decode;
  for (const auto& [seq, len] : prompts) decode.push_back({seq, 0});
  for (int i = 0; i < 5; ++i) p.steps.push_back(decode);
  return p;
}

// Attention data parallelism: each of tp 2 and tp 4 ranks runs its own sequences (attention,
// dense layers and vocabulary whole, its own cache) and the experts are split over all of
// them, the tokens dispatched all-to-all; every rank's logits and tokens equal a one-rank
// model's on the same sequences, with and without int8 weights. A layout without ep = tp is
// refused naming the rule.
TEST(ServingModel, AttentionDataParallelRanksEachGiveTheirSequencesSingleRankLogits) {
  const std::map<int64_t, int64_t> prompts = {{0, 7}, {1, 12}, {2, 3}, {3, 5}};
  for (WeightQuant quant : {WeightQuant::kNone, WeightQuant::kInt8}) {
    for (int64_t tp : {2, 4}) {
      ServingConfig c = SmallExpertModel(tp, tp);
      c.attention_dp = true;
      c.weight_quant = quant;
      std::vector<std::map<int64_t, int64_t>> subsets(tp);
      for (const auto& [seq, len] : prompts) subsets[seq % tp][seq] = len;
      auto got = RunOnEachRank(
          c, [&](ServingModel& m, int rank) { return Drive(m, OneShotPlanOf(subsets[rank])); },
          /*shuffle_seed=*/53);
      ASSERT_TRUE(got.ok()) << got.status();
      ServingConfig one = SmallExpertModel(1);
      one.weight_quant = quant;
      for (int64_t r = 0; r < tp; ++r) {
        auto ref = RunPlan(one, OneShotPlanOf(subsets[r]));
        ASSERT_TRUE(ref.ok()) << ref.status();
        EXPECT_LE(ToleranceRatio((*got)[r], *ref, 1e-5, 1e-4), 1.0)
            << ToString(quant) << " tp " << tp << " rank " << r;
      }
    }
  }
  ServingConfig bad = SmallExpertModel(2, 1);
  bad.attention_dp = true;
  EXPECT_EQ(bad.Validate().message(), "attention_dp needs experts and ep (1) = tp (2)");
}

// Weight-only int4 experts (groups of 8 inputs, which every layout's slices keep whole, so
// each layout quantizes the same groups): TP 2, TP 2 EP 2, TP 4 EP 2 and TP 4 EP 4 give the
// TP 1 int4 logits; int8 experts at TP 2 EP 2 stay within int8's rounding of fp32.
TEST(ServingModel, QuantizedExpertsEqualAcrossLayoutsAndStayCloseToFp32) {
  const auto experts = [](int64_t tp, int64_t ep, WeightQuant quant) {
    ServingConfig c = SmallExpertModel(tp, ep);
    c.weight_quant = quant;
    c.int4_group_size = 8;
    return c;
  };
  auto ref = RunPlan(experts(1, 1, WeightQuant::kInt4), OneShotPlan());
  ASSERT_TRUE(ref.ok()) << ref.status();
  for (auto [tp, ep] : {std::pair<int64_t, int64_t>{2, 1}, {2, 2}, {4, 2}, {4, 4}}) {
    auto got = RunPlan(experts(tp, ep, WeightQuant::kInt4), OneShotPlan(), /*shuffle=*/41);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_LE(ToleranceRatio(*got, *ref, 1e-5, 1e-4), 1.0) << "tp " << tp << " ep " << ep;
  }
  // int8 (a scale per row of 254 steps) keeps the logits near the fp32 model's; int4's
  // coarser rounding can move a token to other experts, so it is only checked to differ.
  auto fp32 = RunPlan(experts(1, 1, WeightQuant::kNone), OneShotPlan());
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  EXPECT_GT(ToleranceRatio(*ref, *fp32, 1e-6, 0), 1.0) << "int4 changed nothing";
  auto int8 = RunPlan(experts(2, 2, WeightQuant::kInt8), OneShotPlan());
  ASSERT_TRUE(int8.ok()) << int8.status();
  EXPECT_LE(ToleranceRatio(*int8, *fp32, 5e-2, 5e-2), 1.0);
  EXPECT_GT(ToleranceRatio(*int8, *fp32, 1e-6, 0), 1.0) << "int8 changed nothing";
  // A group that does not divide an expert's slice is refused naming the field.
  ServingConfig odd = experts(2, 1, WeightQuant::kInt4);
  odd.int4_group_size = 32;
  EXPECT_EQ(odd.Validate().message(),
            "int4_group_size (32) must be even and divide every linear input width (16)");
}

TEST(ServingModel, Bf16KvCacheStaysWithinBf16RoundingOfFp32) {
  auto ref = RunPlan(SmallModel(1), OneShotPlan());
  ServingConfig bf16 = SmallModel(1);
  bf16.kv_dtype = DType::kBF16;
  auto got = RunPlan(bf16, OneShotPlan());
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_TRUE(got.ok()) << got.status();
  const size_t n = 16 * 96;  // the logits (first 16 samples); tokens follow
  std::vector<float> a(got->begin(), got->begin() + n), b(ref->begin(), ref->begin() + n);
  double max_diff = 0;
  for (size_t i = 0; i < n; ++i) max_diff = std::max(max_diff, std::abs(double(a[i]) - b[i]));
  // K and V carry a relative error of at most 2^-9 each; through two layers the logits
  // (|logit| < 4 here) move by well under 1 %; and they do move (bf16 is really stored).
  EXPECT_GT(max_diff, 0.0);
  EXPECT_LE(ToleranceRatio(a, b, 2e-2, 1e-2), 1.0);
}

// What a device's BeginStep stages, built on the host: every held token's slot addresses
// the cell PagedKvCache::Write fills for it, in each block-table group (a windowed layer and
// a whole-context one); positions a windowed group does not hold get −1; the tables are
// the sequences' own, −1 padded; a whole prompt of at least 64 tokens goes to flash
// attention and the paged kernel skips it.
TEST(PagedKvCache, StepArraysAddressTheCellsWriteFills) {
  auto backend = MakeCpuBackend(0, 1);
  KvCacheShape shape;
  shape.num_layers = 2, shape.num_blocks = 64, shape.block_size = 4, shape.groups = 1;
  shape.head_dim = 2, shape.window = 6, shape.windowed = {true, false};
  auto cache = PagedKvCache::Create(*backend, shape, /*shuffle_seed=*/9);
  ASSERT_TRUE(cache.ok()) << cache.status();
  // Seq 0 decodes at 20; seq 1 is a 70-token prompt; seq 2 a 4-token chunk after 8; seq 3
  // a 30-token context written whole (as the step task fills it), holding only its window
  // in the windowed layer.
  ASSERT_TRUE(cache->Reserve(0, 20).ok());
  ASSERT_TRUE(cache->SetLength(0, 20).ok());
  cache->FreeOutsideWindow(0);
  ASSERT_TRUE(cache->Reserve(2, 8).ok());
  ASSERT_TRUE(cache->SetLength(2, 8).ok());
  ASSERT_TRUE(cache->ReserveContext(3, 30).ok());
  const std::vector<SeqChunk> chunks = {
      {0, 20, 1, true}, {1, 0, 70, true}, {2, 8, 4, false}, {3, 0, 30, false}};
  for (const SeqChunk& c : chunks) {
    if (c.seq != 3) {
      ASSERT_TRUE(cache->Reserve(c.seq, c.start + c.num_tokens).ok());
    }
  }
  const StepArrays a = BuildStepArrays(*cache, chunks, 64);
  EXPECT_EQ(a.tokens, (std::vector<int64_t>{1, 70, 4, 30}));
  EXPECT_EQ(a.paged_tokens, (std::vector<int64_t>{1, 0, 4, 30}));
  EXPECT_EQ(a.row0, (std::vector<int64_t>{0, 1, 71, 75}));
  ASSERT_EQ(a.flash.size(), 1u);
  EXPECT_EQ(a.flash[0], (std::pair<int64_t, int64_t>{1, 70}));
  EXPECT_EQ(a.max_chunk_tokens, 70);
  EXPECT_EQ(a.paged_max_tokens, 30);
  ASSERT_EQ(a.positions.size(), 105u);
  EXPECT_EQ(a.positions[0], 20);
  EXPECT_EQ(a.positions[72], 9);
  ASSERT_EQ(a.groups.size(), 2u);
  int unheld = 0;
  for (int64_t layer = 0; layer < 2; ++layer) {
    const StepArrays::Group& g = a.groups[cache->group_of(layer)];
    ASSERT_TRUE(g.used);
    ASSERT_EQ(g.slots.size(), 105u);
    int64_t i = 0;
    for (size_t ci = 0; ci < chunks.size(); ++ci) {
      const SeqChunk& c = chunks[ci];
      const std::vector<int32_t>& table = cache->block_table(c.seq, layer);
      for (size_t b = 0; b < static_cast<size_t>(g.max_blocks); ++b) {
        EXPECT_EQ(g.tables[ci * g.max_blocks + b], b < table.size() ? table[b] : -1);
      }
      for (int64_t pos = c.start; pos < c.start + c.num_tokens; ++pos, ++i) {
        if (!cache->Holds(layer, c.seq, pos)) {
          EXPECT_EQ(g.slots[i], -1) << layer << " " << c.seq << " " << pos;
          ++unheld;
          continue;
        }
        const float k[1 * 2] = {static_cast<float>(1000 * layer + 100 * c.seq + pos), 0.5f};
        const float v[1 * 2] = {0.25f, 0.125f};
        cache->Write(layer, c.seq, pos, k, v);
        const float* pool = cache->pool(layer).data_as<float>();
        const int64_t block = g.slots[i] / 4, offset = g.slots[i] % 4;
        EXPECT_EQ(pool[((block * 2 + 0) * 4 + offset) * 2], k[0]) << layer << " " << pos;
      }
    }
  }
  EXPECT_GT(unheld, 0);  // seq 3's context left of the window in the windowed layer
}

// FP8 E4M3 storage as CUDA's __nv_fp8_e4m3 converts: every code round-trips, ties go to
// the even code, magnitudes from 448 on (infinities too) saturate to ±448, NaN stays NaN.
TEST(PagedKvCache, Fp8E4M3RoundsToNearestEvenAndSaturates) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(FloatToFp8E4M3(Fp8E4M3ToFloat(static_cast<uint8_t>(c))), c) << c;
  }
  EXPECT_EQ(Fp8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(Fp8E4M3ToFloat(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0x7f)));
  EXPECT_EQ(FloatToFp8E4M3(1000.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(std::nanf("")), 0x7f);
  EXPECT_EQ(FloatToFp8E4M3(std::ldexp(1.0f, -10)), 0x00);      // halfway 0 / 2^-9: even 0
  EXPECT_EQ(FloatToFp8E4M3(3 * std::ldexp(1.0f, -10)), 0x02);  // halfway 1 / 2: even 2
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), 0x38);                    // halfway 1 / 1.125: 1
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), 0x3a);                    // halfway 1.125 / 1.25: 1.25
  EXPECT_EQ(FloatToFp8E4M3(-0.3f), 0xaa);                      // nearest: -0.3125
  EXPECT_EQ(FloatToFp8E4M3(0.0153f), 0x08);                    // rounds up into the smallest normal
}

// The prompts' logits (each sequence's first sampled row: later ones follow tokens that a
// coarser cache may change) with an fp8 cache stay within its rounding, and move more than
// with a bf16 cache.
TEST(ServingModel, Fp8KvCacheStaysWithinFp8RoundingAndMovesMoreThanBf16) {
  constexpr size_t kV = 96, kRowsPerSeq = 6;
  const auto prompt_logits = [&](const std::vector<float>& all) {
    std::vector<float> rows;
    for (size_t seq = 0; seq < 3; ++seq) {
      const auto first = all.begin() + seq * kRowsPerSeq * kV;
      rows.insert(rows.end(), first, first + kV);
    }
    return rows;
  };
  auto ref = RunPlan(SmallModel(1), OneShotPlan());
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::vector<float> b = prompt_logits(*ref);
  double max_diff[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    ServingConfig c = SmallModel(1);
    c.kv_dtype = i == 0 ? DType::kBF16 : DType::kFp8E4M3;
    auto got = RunPlan(c, OneShotPlan());
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<float> a = prompt_logits(*got);
    for (size_t j = 0; j < a.size(); ++j) {
      max_diff[i] = std::max(max_diff[i], std::abs(double(a[j]) - b[j]));
    }
    // E4M3 keeps 3 mantissa bits: K and V within 2^-4 relative each (|logit| < 4 here).
    if (i == 1) {
      EXPECT_LE(ToleranceRatio(a, b, 1e-1, 5e-2), 1.0);
    }
  }
  std::printf("max prompt-logit difference: bf16 KV %.4g, fp8 KV %.4g\n", max_diff[0], max_diff[1]);
  EXPECT_GT(max_diff[1], 2 * max_diff[0]);
}

// The per-GEMM bound is exact (serving_weight_only_linear_test); through a model it
// compounds, so this checks the logits only loosely.
TEST(ServingModel, WeightOnlyInt8AndInt4KeepLogitsCloseToFp32) {
  auto ref = RunPlan(SmallModel(2), OneShotPlan());
  ASSERT_TRUE(ref.ok()) << ref.status();
  const size_t n = 16 * 96;
  std::vector<float> b(ref->begin(), ref->begin() + n);
  // int4 rounds to 1/14 of a group's range instead of 1/254 of a row's: a looser bound.
  for (auto [quant, tol] :
       {std::pair{WeightQuant::kInt8, 5e-2}, std::pair{WeightQuant::kInt4, 3e-1}}) {
    ServingConfig c = SmallModel(2);
    c.weight_quant = quant;
    c.int4_group_size = 16;
    auto got = RunPlan(c, OneShotPlan());
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<float> a(got->begin(), got->begin() + n);
    EXPECT_LE(ToleranceRatio(a, b, tol, tol), 1.0) << ToString(quant);
    EXPECT_GT(ToleranceRatio(a, b, 1e-6, 0), 1.0) << ToString(quant) << " changed nothing";
  }
}

// With learned positions (no rotation) a prefill through the serving layer is the training
// layer's forward (flash attention, no dropout) on the same weights.
TEST(ServingLayer, PrefillEqualsTrainingLayerForward) {
  // Whole context at tp 1 and 2, and a 4-key sliding window (one block of the cache).
  for (auto [tp, window] : {std::pair<int64_t, int64_t>{1, 0}, {2, 0}, {2, 4}}) {
    ServingConfig c = SmallModel(tp, 1);
    c.attention_window = window;
    c.position_embedding = PositionEmbedding::kLearned;
    constexpr int64_t kSeq = 11;
    const int64_t h = c.shape.hidden_size;
    std::vector<double> x(kSeq * h);
    for (int64_t i = 0; i < kSeq * h; ++i) x[i] = 2.0 * HashUniform(5, i) - 1.0;
    const int t = static_cast<int>(tp);
    auto rendezvous = MakeInProcessRendezvous();
    std::vector<std::vector<float>> serving_y(t), training_y(t);
    std::vector<absl::Status> status(t);
    std::vector<std::thread> threads;
    for (int r = 0; r < t; ++r) {
      threads.emplace_back([&, r]() {
        status[r] = [&]() -> absl::Status {
          std::unique_ptr<Communicator> comm;
          if (t == 1) {
            comm = MakeSelfCommunicator();
          } else {
            auto made = MakeGlooCommunicator(rendezvous,
                                             absl::StrCat("vs-training", tp, "-", window), r, t);
            if (!made.ok()) return made.status();
            comm = std::move(*made);
          }
          auto backend = MakeCpuBackend(0, 1);
          ParallelContext ctx{backend.get(), comm.get(), nullptr};
          auto xt = backend->Empty({kSeq, h}, DType::kF32, MemoryTag::kActivations);
          if (!xt.ok()) return xt.status();
          if (auto s = backend->CopyFromHost(*xt, x); !s.ok()) return s;
          auto ops = MakeServingOps(*backend, 1);
          if (!ops.ok()) return ops.status();
          auto layer = ServingLayer::Create(c, ctx, 0, ops->get());
          if (!layer.ok()) return layer.status();
          KvCacheShape kv;
          kv.num_layers = 1, kv.num_blocks = 8, kv.block_size = 4;
          kv.groups = c.num_query_groups() / tp, kv.head_dim = c.head_dim();
          auto cache = PagedKvCache::Create(*backend, kv);
          if (!cache.ok()) return cache.status();
          if (auto s = cache->Reserve(0, kSeq); !s.ok()) return s;
          const std::vector<SeqChunk> chunks = {{0, 0, kSeq, false}};
          if (auto s = (*ops)->BeginStep(*cache, chunks); !s.ok()) return s;
          auto y = (*layer)->Forward(*xt, chunks, &*cache);
          if (!y.ok()) return y.status();
          serving_y[r].assign(y->data_as<float>(), y->data_as<float>() + kSeq * h);
          auto training = TransformerLayer::Create(c.AsLayerConfig(kSeq), ctx);
          if (!training.ok()) return training.status();
          auto ty = (*training)->Forward(*xt);
          if (!ty.ok()) return ty.status();
          training_y[r].assign(ty->data_as<float>(), ty->data_as<float>() + kSeq * h);
          return absl::OkStatus();
        }();
      });
    }
    for (auto& th : threads) th.join();
    for (auto& s : status) ASSERT_TRUE(s.ok()) << s;
    EXPECT_LE(ToleranceRatio(serving_y[0], training_y[0], 1e-5, 1e-4), 1.0)
        << "tp " << tp << " window " << window;
  }
}

TEST(ServingModel, KvCacheOverflowIsResourceExhausted) {
  ServingConfig c = SmallModel(1);
  c.num_kv_blocks = 2;  // 8 tokens
  auto run = RunOnRanks(c, [&](ServingModel& m) -> absl::StatusOr<std::vector<float>> {
    auto out = m.Step(Prompt(0, 12, 96), {{0, 0, 12, true}}, false);
    if (!out.ok()) return out.status();
    return std::vector<float>();
  });
  ASSERT_EQ(run.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(run.status().message(), "kv cache: the step needs 3 more blocks, 2 free");
}

TEST(ServingModel, SixteenBitActivationsNeedTheCudaBackend) {
  ServingConfig c = SmallModel(1);
  c.dtype = DType::kBF16;
  auto backend = MakeCpuBackend(0, 1);
  auto self = MakeSelfCommunicator();
  ParallelContext ctx{backend.get(), self.get(), nullptr};
  auto model = ServingModel::Create(c, ctx);
  ASSERT_EQ(model.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(model.status().message(), "dtype bf16 runs on the CUDA backend; the CPU's is fp32");
}

TEST(ServingConfig, ValidateNamesTheFieldAndTheRule) {
  ServingConfig c = SmallModel(3);
  EXPECT_EQ(c.Validate().message(), "tp (3) must divide num_attention_heads (8)");
  c = SmallModel(1);
  c.kv_dtype = DType::kF16;
  EXPECT_EQ(c.Validate().message(), "kv_dtype (fp16) must be fp32, bf16 or fp8");
  c = SmallModel(1);
  c.dtype = DType::kU8;
  EXPECT_EQ(c.Validate().message(), "dtype (u8) must be fp32, bf16 or fp16");
  c = SmallModel(1);
  c.dtype = DType::kBF16;
  c.weight_quant = WeightQuant::kInt8;
  EXPECT_EQ(c.Validate().message(), "weight_quant (int8) needs dtype fp32 (bf16)");
  c = SmallModel(1);
  c.kv_block_size = 0;
  EXPECT_EQ(c.Validate().message(), "kv_block_size (0) must be positive");
  c = SmallModel(2);
  c.weight_quant = WeightQuant::kInt4;
  c.int4_group_size = 48;
  EXPECT_EQ(c.Validate().message(),
            "int4_group_size (48) must be even and divide every linear input width (64)");
}

}  // namespace
}  // namespace paratune::kernels::serving
