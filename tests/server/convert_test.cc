// Wire <-> domain conversions: every layout field round-trips (binary and the proto JSON
// mapping), the resolved spec, and profile-mode composition of a layout read back from its
// wire form (Llama 3.1 405B: 126 layers over pp 8 x vp 8).
#include "server/convert.h"

#include <gmock/gmock.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <string>

#include "search/compose.h"
#include "search/planner.h"
#include "search/profile_plan.h"
#include "search/spec_io.h"

namespace paratune::server {
namespace {

using nlohmann::json;

// Counts the members of an aggregate: the largest N for which T{x1, ..., xN} compiles.
struct AnyField {
  template <typename T>
  constexpr operator T() const noexcept {
    return T{};
  }
};

template <typename T, typename... Fields>
constexpr size_t AggregateFieldCount() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; }) {
    return AggregateFieldCount<T, Fields..., AnyField>();
  } else {
    return sizeof...(Fields);
  }
}

TEST(ConvertTest, TheWireLayoutHasAFieldForEveryDomainField) {
  // A field added to the domain layout and not to v1::ParallelConfig fails here first. The
  // wire has one field more: distributed_optimizer, derived from data_parallel_sharding and
  // kept for readers (and stored layouts) that predate it.
  EXPECT_EQ(AggregateFieldCount<ParallelConfig>() + 1,
            static_cast<size_t>(v1::ParallelConfig::descriptor()->field_count()));
}

/// Every field random: sizes over the whole int64 range as well as small ones, every
/// recompute mode, every flag both ways.
ParallelConfig RandomLayout(std::mt19937_64& rng) {
  auto size = [&rng]() -> int64_t {
    switch (rng() % 3) {
      case 0:
        return static_cast<int64_t>(rng() % 16);
      case 1:
        return static_cast<int64_t>(rng() % 4096);
      default:
        return static_cast<int64_t>(rng());  // negative ones too
    }
  };
  auto flag = [&rng] { return rng() % 2 == 1; };
  constexpr Recompute kModes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  constexpr MoeTokenDispatcher kDispatchers[] = {
      MoeTokenDispatcher::kAllToAll, MoeTokenDispatcher::kAllGather, MoeTokenDispatcher::kFlex};
  ParallelConfig c;
  c.tp = size();
  c.pp = size();
  c.dp = size();
  c.cp = size();
  c.vp = size();
  c.micro_batch_size = size();
  c.sequence_parallel = flag();
  c.recompute = kModes[rng() % 3];
  c.recompute_num_layers = size();
  c.split_counts_embedding_and_loss = flag();
  c.overlap_grad_reduce = flag();
  c.tp_comm_overlap = flag();
  c.overlap_p2p_comm = flag();
  c.overlap_param_gather = flag();
  c.ep = size();
  c.etp = size();
  c.moe_token_dispatcher = kDispatchers[rng() % 3];
  constexpr DataParallelSharding kShardings[] = {
      DataParallelSharding::kNone, DataParallelSharding::kOptimizer,
      DataParallelSharding::kOptimizerGrads, DataParallelSharding::kFull};
  c.data_parallel_sharding = kShardings[rng() % 4];
  c.shard_group_size = size();
  constexpr Offload kOffloads[] = {Offload::kNone, Offload::kOptimizer,
                                   Offload::kOptimizerAndParams};
  c.offload = kOffloads[rng() % 3];
  c.activation_offload = flag();
  return c;
}

TEST(ConvertTest, EveryLayoutFieldRoundTripsThroughTheWireAndItsJson) {
  std::mt19937_64 rng(20240521);
  const ParallelConfig defaults;
  int differs_from_default[21] = {};
  for (int i = 0; i < 5000; ++i) {
    const ParallelConfig c = RandomLayout(rng);
    const v1::ParallelConfig wire = ToProto(c);
    absl::StatusOr<ParallelConfig> back = ParallelConfigFromProto(wire);
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(*back, c) << c.ToString();

    // Serialized bytes (the store) and the proto JSON mapping (REST, --json).
    v1::ParallelConfig parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire.SerializeAsString()));
    ASSERT_EQ(*ParallelConfigFromProto(parsed), c) << c.ToString();
    v1::ParallelConfig from_json;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(WireJson(wire), &from_json).ok());
    ASSERT_EQ(*ParallelConfigFromProto(from_json), c) << WireJson(wire);

    // The sample exercises every field away from its default, so a dropped one fails above.
    const bool changed[21] = {
        c.tp != defaults.tp,
        c.pp != defaults.pp,
        c.dp != defaults.dp,
        c.cp != defaults.cp,
        c.vp != defaults.vp,
        c.micro_batch_size != defaults.micro_batch_size,
        c.sequence_parallel != defaults.sequence_parallel,
        c.recompute != defaults.recompute,
        c.recompute_num_layers != defaults.recompute_num_layers,
        c.split_counts_embedding_and_loss != defaults.split_counts_embedding_and_loss,
        c.overlap_grad_reduce != defaults.overlap_grad_reduce,
        c.tp_comm_overlap != defaults.tp_comm_overlap,
        c.overlap_p2p_comm != defaults.overlap_p2p_comm,
        c.overlap_param_gather != defaults.overlap_param_gather,
        c.ep != defaults.ep,
        c.etp != defaults.etp,
        c.moe_token_dispatcher != defaults.moe_token_dispatcher,
        c.data_parallel_sharding != defaults.data_parallel_sharding,
        c.shard_group_size != defaults.shard_group_size,
        c.offload != defaults.offload,
        c.activation_offload != defaults.activation_offload};
    for (int f = 0; f < 21; ++f) differs_from_default[f] += changed[f];
  }
  for (int f = 0; f < 21; ++f) EXPECT_GT(differs_from_default[f], 1000) << "field " << f;
}
TEST(ConvertTest, ALayoutStoredWithOnlyDistributedOptimizerReadsAsOptimizerSharding) {
  v1::ParallelConfig stored;
  stored.set_tp(2);
  stored.set_dp(4);
  stored.set_recompute("none");
  stored.set_distributed_optimizer(true);
  absl::StatusOr<ParallelConfig> read = ParallelConfigFromProto(stored);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->data_parallel_sharding, DataParallelSharding::kOptimizer);
  stored.set_distributed_optimizer(false);
  EXPECT_EQ(ParallelConfigFromProto(stored)->data_parallel_sharding, DataParallelSharding::kNone);

  // Written today: both, so an older reader still sees the optimizer sharded.
  ParallelConfig fsdp;
  fsdp.dp = 8;
  fsdp.data_parallel_sharding = DataParallelSharding::kFull;
  fsdp.shard_group_size = 4;
  const v1::ParallelConfig wire = ToProto(fsdp);
  EXPECT_TRUE(wire.distributed_optimizer());
  EXPECT_EQ(wire.data_parallel_sharding(), "full");
  EXPECT_EQ(wire.shard_group_size(), 4);
  stored.set_data_parallel_sharding("zero9");
  EXPECT_EQ(ParallelConfigFromProto(stored).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConvertTest, FlagsOnByDefaultAreExplicitOnTheWireAndOnWhenAbsent) {
  ParallelConfig off;
  off.overlap_grad_reduce = false;
  off.overlap_p2p_comm = false;
  off.overlap_param_gather = false;
  const json j = json::parse(WireJson(ToProto(off)));
  EXPECT_EQ(j["overlap_grad_reduce"], false);
  EXPECT_EQ(j["overlap_p2p_comm"], false);
  EXPECT_EQ(j["overlap_param_gather"], false);
  EXPECT_EQ(j["split_counts_embedding_and_loss"], false);
  EXPECT_EQ(j["tp_comm_overlap"], false);

  // A layout stored before the flags existed has neither: Megatron-Core's defaults (on).
  v1::ParallelConfig old;
  old.set_tp(8);
  old.set_recompute("none");
  absl::StatusOr<ParallelConfig> c = ParallelConfigFromProto(old);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->overlap_grad_reduce);
  EXPECT_TRUE(c->overlap_p2p_comm);
  EXPECT_TRUE(c->overlap_param_gather);
  EXPECT_FALSE(c->split_counts_embedding_and_loss);
  EXPECT_FALSE(c->tp_comm_overlap);
  // Nor the expert layout: no expert parallelism, the all-to-all dispatcher.
  EXPECT_EQ(c->ep, 1);
  EXPECT_EQ(c->etp, 1);
  EXPECT_EQ(c->moe_token_dispatcher, MoeTokenDispatcher::kAllToAll);

  old.set_recompute("sometimes");
  EXPECT_EQ(ParallelConfigFromProto(old).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(ParallelConfigFromProto(old).status().message()).rfind("recompute: ", 0),
            0u)
      << ParallelConfigFromProto(old).status();
}

TEST(ConvertTest, RankedConfigRoundTrips) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> real(0, 1e6);
  for (int i = 0; i < 200; ++i) {
    RankedConfig r;
    r.rank = static_cast<int64_t>(rng() % 100);
    r.config = RandomLayout(rng);
    r.iteration_time_s = real(rng);
    r.tokens_per_sec_per_gpu = real(rng);
    r.model_tflops_per_gpu = real(rng);
    r.hardware_tflops_per_gpu = real(rng);
    r.mfu = real(rng) / 1e6;
    // GiB on the wire: a power of two, so bytes come back exactly.
    r.memory = {real(rng) * 1e4, real(rng), real(rng), real(rng), real(rng), real(rng),
                real(rng),       real(rng), real(rng)};
    r.fits = rng() % 2 == 1;
    r.source = rng() % 2 == 1 ? ResultSource::kMeasured : ResultSource::kModelled;
    r.time = {real(rng), real(rng), real(rng), real(rng),
              real(rng), real(rng), real(rng), real(rng)};
    r.time_to_train_days = real(rng);
    r.notes = {"bubble " + std::to_string(i)};
    absl::StatusOr<RankedConfig> back = RankedConfigFromProto(ToProto(r));
    ASSERT_TRUE(back.ok()) << back.status();
    // Equal wire forms and equal domain layouts: nothing is lost either way.
    EXPECT_EQ(ToProto(*back).SerializeAsString(), ToProto(r).SerializeAsString());
    EXPECT_EQ(back->config, r.config);
    EXPECT_EQ(back->memory.activations, r.memory.activations);
    EXPECT_EQ(back->memory.loss_buffers, r.memory.loss_buffers);
    EXPECT_EQ(back->memory.host, r.memory.host);
    EXPECT_EQ(back->memory.host_capacity, r.memory.host_capacity);
    EXPECT_EQ(back->time.pp_p2p, r.time.pp_p2p);
    EXPECT_EQ(back->time.ep_comm, r.time.ep_comm);
    EXPECT_EQ(back->time.offload, r.time.offload);
    EXPECT_EQ(back->source, r.source);
    EXPECT_EQ(back->notes, r.notes);
  }
}

TEST(ConvertTest, MixtureOfExpertsSpecRoundTripsThroughTheWire) {
  absl::StatusOr<JobSpec> spec = JobSpecFromJson(json::parse(R"({
    "model": {"preset": "deepseek-v3"},
    "training": {"seq_length": 4096, "global_batch_size": 8192, "moe_routing": "capacity",
                 "moe_capacity_factor": 1.25},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 1024, "nvlink_domain": 8},
    "search": {"ep": [8, 64], "etp": [1], "moe_token_dispatcher": ["alltoall", "flex"]}})"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<v1::JobSpec> wire = SpecToProto(*spec);
  ASSERT_TRUE(wire.ok()) << wire.status();
  EXPECT_EQ(wire->model().num_experts(), 256);
  EXPECT_EQ(wire->model().attention(), "mla");
  EXPECT_EQ(wire->model().kv_lora_rank(), 512);
  EXPECT_EQ(wire->model().first_k_dense_layers(), 3);
  EXPECT_EQ(wire->model().mtp_layers(), 1);
  EXPECT_EQ(wire->training().moe_routing(), "capacity");
  EXPECT_EQ(wire->cluster().nvlink_domain(), 8);
  ASSERT_EQ(wire->search().ep_size(), 2);
  EXPECT_EQ(wire->search().moe_token_dispatcher(1), "flex");
  absl::StatusOr<JobSpec> back = SpecFromProto(*wire);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(JobSpecToJson(*back), JobSpecToJson(*spec));
}

TEST(ConvertTest, EveryTrainingFrameworkRoundTripsThroughTheWire) {
  for (const char* framework :
       {"megatron-core", "nemo", "megatron-deepspeed", "deepspeed", "torchtitan", "llm-foundry",
        "nemo-automodel"}) {
    absl::StatusOr<JobSpec> spec = JobSpecFromJson(json{
        {"model", {{"preset", "llama2-7b"}}},
        {"training", {{"seq_length", 4096}, {"global_batch_size", 64}, {"framework", framework}}},
        {"cluster", {{"gpu", "h100-sxm-80gb"}, {"num_gpus", 8}}}});
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<v1::JobSpec> wire = SpecToProto(*spec);
    ASSERT_TRUE(wire.ok()) << wire.status();
    EXPECT_EQ(wire->training().framework(), framework);
    absl::StatusOr<JobSpec> back = SpecFromProto(*wire);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->training.framework, spec->training.framework);
    EXPECT_EQ(JobSpecToJson(*back), JobSpecToJson(*spec));
  }
  // Absent on the wire (a message from before the field): the default.
  absl::StatusOr<JobSpec> spec = JobSpecFromJson(json::parse(R"({
    "model": {"preset": "llama2-7b"}, "training": {"seq_length": 4096, "global_batch_size": 64},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8}})"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::JobSpec wire = *SpecToProto(*spec);
  wire.mutable_training()->clear_framework();
  EXPECT_EQ(SpecFromProto(wire)->training.framework, Framework::kMegatronCore);
  wire.mutable_training()->set_framework("fsdp");
  EXPECT_THAT(std::string(SpecFromProto(wire).status().message()),
              ::testing::HasSubstr("training.framework: unknown framework 'fsdp'"));
}

TEST(ConvertTest, ResolvedSpecExpandsThePresetAndReadsBackToTheSameSpec) {
  absl::StatusOr<JobSpec> spec = JobSpecFromJson(json::parse(R"({
    "model": {"preset": "llama3.1-405b"},
    "training": {"seq_length": 8192, "global_batch_size": 512},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 1024},
    "search": {"tp": [8], "pp": [8], "vp": [8], "mode": "profile"}})"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<v1::JobSpec> resolved = SpecToProto(*spec);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->model().preset(), "");
  EXPECT_EQ(resolved->model().num_layers(), 126);
  EXPECT_EQ(resolved->model().hidden_size(), 16384);
  EXPECT_EQ(resolved->model().num_query_groups(), 8);
  EXPECT_EQ(resolved->model().ffn_hidden_size(), 53248);
  EXPECT_EQ(resolved->model().vocab_size(), 128256);
  EXPECT_EQ(resolved->cluster().gpus_per_node(), 8);
  EXPECT_EQ(resolved->search().top_k(), 10);
  absl::StatusOr<JobSpec> back = SpecFromProto(*resolved);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(JobSpecToJson(*back), JobSpecToJson(*spec));
}

// Layer tasks measured at 1 ms forward, 2 ms backward (plus 1 ms recompute where the task
// recomputes), no TP communication; stage extras equal to the plain layer; every collective
// sweep 100 us + bytes / (100 GB/s).
Measurements SyntheticMeasurements(const ProfilePlan& profile) {
  Measurements m;
  for (const ProfileTaskSpec& t : profile.tasks) {
    if (t.kind == ProfileTaskSpec::Kind::kCollective) {
      CommMeasurement comm;
      for (int64_t bytes : t.collective.sizes_bytes) {
        comm.samples.push_back({bytes, 1e-4 + static_cast<double>(bytes) / 1e11, 1e11});
      }
      m.collectives[t.key] = comm;
      continue;
    }
    if (t.kind != ProfileTaskSpec::Kind::kLayer) continue;
    LayerMeasurement layer;
    layer.forward_s = 1e-3;
    layer.backward_s = 2e-3;
    layer.recompute_s = t.layer.recompute == Recompute::kNone ? 0 : 1e-3;
    if (t.layer.extras == StageExtras::kNone) {
      m.layers[t.key] = layer;
      continue;
    }
    LayerProfileSpec plain = t.layer;
    plain.extras = StageExtras::kNone;
    (t.layer.extras == StageExtras::kFirst ? m.first_stage : m.last_stage)[plain.Key()] = layer;
  }
  return m;
}

TEST(ConvertTest, ProfileModeComposesTheModelledLayerCountsOf126LayersOverPp8Vp8) {
  // Llama 3.1 405B: 126 layers do not split evenly over pp*vp = 64 model chunks; the
  // planner counts the embedding and the loss as layers (128 / 64 = 2 per chunk, the first
  // and last chunks 1). The coordinator's compose step reads the modelled plan back from
  // its stored wire form (RunCompose: PlanResultFromProto -> PlanProfiles -> ComposePlan).
  absl::StatusOr<JobSpec> spec = JobSpecFromJson(json::parse(R"({
    "model": {"preset": "llama3.1-405b"},
    "training": {"seq_length": 8192, "global_batch_size": 512},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 1024},
    "search": {"tp": [8], "pp": [8], "vp": [8], "top_k": 4, "mode": "profile"}})"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<PlanResult> modelled = Plan(*spec);
  ASSERT_TRUE(modelled.ok()) << modelled.status();
  ASSERT_FALSE(modelled->ranked.empty());

  v1::PlanResult stored;
  ASSERT_TRUE(stored.ParseFromString(ToProto(*modelled).SerializeAsString()));
  absl::StatusOr<PlanResult> read_back = PlanResultFromProto(stored);
  ASSERT_TRUE(read_back.ok()) << read_back.status();

  const ProfilePlanOptions options;
  absl::StatusOr<ProfilePlan> profile = PlanProfiles(*spec, *read_back, options);
  ASSERT_TRUE(profile.ok()) << profile.status();
  const PlanResult composed =
      ComposePlan(*spec, *read_back, *profile, options, SyntheticMeasurements(*profile));

  // The same composition straight from the planner's result, without the wire.
  absl::StatusOr<ProfilePlan> direct_profile = PlanProfiles(*spec, *modelled, options);
  ASSERT_TRUE(direct_profile.ok()) << direct_profile.status();
  const PlanResult direct = ComposePlan(*spec, *modelled, *direct_profile, options,
                                        SyntheticMeasurements(*direct_profile));

  const int64_t L = spec->model.num_layers;
  ASSERT_EQ(L, 126);
  ASSERT_EQ(composed.ranked.size(), modelled->ranked.size());
  int measured = 0;
  for (size_t i = 0; i < composed.ranked.size(); ++i) {
    const RankedConfig& r = composed.ranked[i];
    measured += r.source == ResultSource::kMeasured;
    // Its modelled entry: the layout the planner ranked.
    const RankedConfig* planned = nullptr;
    for (const RankedConfig& m : modelled->ranked) {
      if (m.config == r.config) planned = &m;
    }
    ASSERT_NE(planned, nullptr) << "composed layout not in the modelled plan: "
                                << r.config.ToString();
    ASSERT_TRUE(r.config.split_counts_embedding_and_loss) << r.config.ToString();
    int64_t total = 0;
    for (int64_t stage = 0; stage < 8; ++stage) {
      for (int64_t chunk = 0; chunk < 8; ++chunk) {
        const int64_t layers = r.config.LayersInChunk(L, stage, chunk);
        EXPECT_EQ(layers, planned->config.LayersInChunk(L, stage, chunk));
        const bool edge = (stage == 0 && chunk == 0) || (stage == 7 && chunk == 7);
        EXPECT_EQ(layers, edge ? 1 : 2) << "stage " << stage << " chunk " << chunk;
        total += layers;
      }
    }
    EXPECT_EQ(total, L);
    // And the same composed figures as without the wire in between.
    EXPECT_EQ(r.config, direct.ranked[i].config);
    EXPECT_EQ(r.iteration_time_s, direct.ranked[i].iteration_time_s);
    EXPECT_EQ(r.time.compute, direct.ranked[i].time.compute);
  }
  EXPECT_GT(measured, 0);
}

}  // namespace
}  // namespace paratune::server
