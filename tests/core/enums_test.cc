#include "core/enums.h"

#include <gtest/gtest.h>

#include <string>

namespace paratune {
namespace {

// Every value parses back from its name, and the names are the ones spec files, tasks and
// the wire use.
template <typename E, size_t N>
void ExpectRoundTrip(const E (&all)[N], absl::StatusOr<E> (*parse)(absl::string_view),
                     const char* const (&names)[N]) {
  for (size_t i = 0; i < N; ++i) {
    EXPECT_STREQ(ToString(all[i]), names[i]);
    absl::StatusOr<E> back = parse(names[i]);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, all[i]) << names[i];
  }
}

TEST(EnumsTest, NamesRoundTrip) {
  ExpectRoundTrip({Activation::kGelu, Activation::kSwiglu, Activation::kGeglu,
                   Activation::kSquaredRelu},
                  ParseActivation, {"gelu", "swiglu", "geglu", "squared_relu"});
  ExpectRoundTrip({Normalization::kLayerNorm, Normalization::kRmsNorm}, ParseNormalization,
                  {"layernorm", "rmsnorm"});
  ExpectRoundTrip({PositionEmbedding::kLearned, PositionEmbedding::kRope},
                  ParsePositionEmbedding, {"learned", "rope"});
  ExpectRoundTrip({Precision::kFp32, Precision::kBf16, Precision::kFp16, Precision::kFp8,
                   Precision::kMxfp8, Precision::kNvfp4},
                  ParsePrecision, {"fp32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4"});
  ExpectRoundTrip({Recompute::kNone, Recompute::kSelective, Recompute::kFull}, ParseRecompute,
                  {"none", "selective", "full"});
  ExpectRoundTrip({CollectiveOp::kAllReduce, CollectiveOp::kAllGather,
                   CollectiveOp::kReduceScatter, CollectiveOp::kSendRecv, CollectiveOp::kAllToAll},
                  ParseCollectiveOp,
                  {"all_reduce", "all_gather", "reduce_scatter", "send_recv", "all_to_all"});
  ExpectRoundTrip({StageExtras::kNone, StageExtras::kFirst, StageExtras::kLast},
                  ParseStageExtras, {"none", "first", "last"});
  ExpectRoundTrip({AttentionType::kMha, AttentionType::kGqa, AttentionType::kMla},
                  ParseAttentionType, {"mha", "gqa", "mla"});
  ExpectRoundTrip(
      {MoeTokenDispatcher::kAllToAll, MoeTokenDispatcher::kAllGather, MoeTokenDispatcher::kFlex},
      ParseMoeTokenDispatcher, {"alltoall", "allgather", "flex"});
  ExpectRoundTrip({MoeRouting::kBalanced, MoeRouting::kDropless, MoeRouting::kCapacity},
                  ParseMoeRouting, {"balanced", "dropless", "capacity"});
}

TEST(EnumsTest, UnknownNamesListTheAcceptedOnes) {
  EXPECT_EQ(ParseActivation("relu").status().message(),
            "unknown activation 'relu' (expected gelu, swiglu, geglu, squared_relu)");
  EXPECT_EQ(ParseCollectiveOp("broadcast").status().message(),
            "unknown collective op 'broadcast' (expected all_reduce, all_gather, "
            "reduce_scatter, send_recv, all_to_all)");
  EXPECT_EQ(ParseStageExtras("middle").status().message(),
            "unknown stage extras 'middle' (expected none, first, last)");
  // Names are exact: no case folding, no empty default.
  EXPECT_EQ(ParseRecompute("Full").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRecompute("").status().message(),
            "unknown recompute '' (expected none, selective, full)");
}

}  // namespace
}  // namespace paratune
