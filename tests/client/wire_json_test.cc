// The canonical spec JSON is the wire contract's JSON: JobSpecToJson parses as
// paratune.v1.JobSpec (unknown fields rejected), and the proto JSON mapping of a JobSpec
// (int64 as strings) reads back. (Results are printed from their wire form: render_test.)
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "paratune/v1/spec.pb.h"
#include "search/spec_io.h"

namespace paratune {
namespace {

using google::protobuf::util::JsonParseOptions;
using google::protobuf::util::JsonPrintOptions;
using google::protobuf::util::JsonStringToMessage;
using google::protobuf::util::MessageToJsonString;

TEST(WireJsonTest, CanonicalSpecJsonIsAJobSpecMessage) {
  auto spec = JobSpecFromJson(nlohmann::json::parse(R"({
    "model": {"preset": "llama3-8b"},
    "training": {"seq_length": 8192, "global_batch_size": 128, "total_tokens": 1000000},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16},
    "search": {"tp": [2, 4], "recompute": ["selective"], "sequence_parallel": true}})"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::JobSpec proto;
  JsonParseOptions strict;
  strict.ignore_unknown_fields = false;
  const std::string text = JobSpecToJson(*spec).dump();
  auto status = JsonStringToMessage(text, &proto, strict);
  ASSERT_TRUE(status.ok()) << status.ToString() << "\n" << text;
  EXPECT_EQ(proto.model().num_query_groups(), 8);
  EXPECT_EQ(proto.model().activation(), "swiglu");
  EXPECT_EQ(proto.search().tp_size(), 2);
  EXPECT_EQ(proto.training().total_tokens(), 1000000);

  // Back through the proto JSON mapping (int64 printed as strings) to the domain.
  std::string printed;
  JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  ASSERT_TRUE(MessageToJsonString(proto, &printed, print).ok());
  EXPECT_NE(printed.find("\"seq_length\":\"8192\""), std::string::npos) << printed;
  auto back = JobSpecFromJson(nlohmann::json::parse(printed));
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << printed;
  EXPECT_EQ(JobSpecToJson(*back), JobSpecToJson(*spec));
}

TEST(WireJsonTest, ProtoJsonOfAPresetSpecReadsBack) {
  // What a REST client sends: only the fields it sets, int64 as strings.
  v1::JobSpec proto;
  proto.mutable_model()->set_preset("gpt3-175b");
  proto.mutable_training()->set_seq_length(2048);
  proto.mutable_training()->set_global_batch_size(1536);
  proto.mutable_cluster()->set_gpu("a100-80gb");
  proto.mutable_cluster()->set_num_gpus(1024);
  proto.mutable_search()->add_tp(8);
  std::string printed;
  JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  ASSERT_TRUE(MessageToJsonString(proto, &printed, print).ok());
  auto spec = JobSpecFromJson(nlohmann::json::parse(printed));
  ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << printed;
  EXPECT_EQ(spec->model.num_layers, 96);
  EXPECT_EQ(spec->cluster.gpus_per_node, 8);  // absent = default
  EXPECT_EQ(spec->search.tp, (std::vector<int64_t>{8}));
  EXPECT_EQ(spec->search.top_k, 10);
}

}  // namespace
}  // namespace paratune
