// The wire contract round-trips through binary and through the proto JSON mapping with
// snake_case names (what REST clients send), and unknown JSON fields are rejected.
#include <string>

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "paratune/v1/job.pb.h"
#include "paratune/v1/service.grpc.pb.h"

namespace paratune {
namespace {

using google::protobuf::util::JsonParseOptions;
using google::protobuf::util::JsonPrintOptions;
using google::protobuf::util::JsonStringToMessage;
using google::protobuf::util::MessageToJsonString;

v1::JobSpec SampleSpec() {
  v1::JobSpec spec;
  spec.set_name("gpt3-175b on 1024");
  spec.mutable_model()->set_preset("gpt3-175b");
  spec.mutable_training()->set_seq_length(2048);
  spec.mutable_training()->set_global_batch_size(1536);
  spec.mutable_training()->set_flash_attention(false);
  spec.mutable_cluster()->set_gpu("a100-80gb");
  spec.mutable_cluster()->set_num_gpus(1024);
  spec.mutable_search()->add_tp(8);
  spec.mutable_search()->add_recompute("selective");
  return spec;
}

TEST(WireContract, BinaryRoundTrip) {
  const v1::JobSpec spec = SampleSpec();
  v1::JobSpec back;
  ASSERT_TRUE(back.ParseFromString(spec.SerializeAsString()));
  EXPECT_EQ(back.SerializeAsString(), spec.SerializeAsString());
  EXPECT_EQ(back.cluster().num_gpus(), 1024);
  // `optional` keeps presence: an explicit false differs from "not given".
  EXPECT_TRUE(back.training().has_flash_attention());
  EXPECT_FALSE(back.training().flash_attention());
  EXPECT_FALSE(back.training().has_dropout());
}

TEST(WireContract, JsonUsesSnakeCaseAndRoundTrips) {
  JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  std::string json;
  ASSERT_TRUE(MessageToJsonString(SampleSpec(), &json, print).ok());
  EXPECT_NE(json.find("\"global_batch_size\":"), std::string::npos) << json;
  EXPECT_EQ(json.find("globalBatchSize"), std::string::npos) << json;
  // int64 values are strings in proto JSON.
  EXPECT_NE(json.find("\"num_gpus\":\"1024\""), std::string::npos) << json;

  v1::JobSpec back;
  ASSERT_TRUE(JsonStringToMessage(json, &back, JsonParseOptions()).ok());
  EXPECT_EQ(back.SerializeAsString(), SampleSpec().SerializeAsString());
}

TEST(WireContract, JsonAcceptsNumbersAndRejectsUnknownFields) {
  v1::JobSpec spec;
  ASSERT_TRUE(JsonStringToMessage(R"({"cluster": {"num_gpus": 64, "gpu": "h100-sxm-80gb"}})",
                                  &spec, JsonParseOptions())
                  .ok());
  EXPECT_EQ(spec.cluster().num_gpus(), 64);
  const auto status =
      JsonStringToMessage(R"({"cluster": {"num_gpuz": 64}})", &spec, JsonParseOptions());
  EXPECT_FALSE(status.ok());
  EXPECT_NE(std::string(status.message()).find("num_gpuz"), std::string::npos);
}

TEST(WireContract, JobStateNamesAreStable) {
  EXPECT_EQ(v1::JobState_Name(v1::JOB_STATE_SUCCEEDED), "JOB_STATE_SUCCEEDED");
  v1::JobState state;
  ASSERT_TRUE(v1::JobState_Parse("JOB_STATE_PROFILING", &state));
  EXPECT_EQ(state, v1::JOB_STATE_PROFILING);
}

TEST(WireContract, ServicesDeclareTheDesignedMethods) {
  const auto* autotuner =
      v1::SubmitJobRequest::descriptor()->file()->pool()->FindServiceByName(
          "paratune.v1.Autotuner");
  ASSERT_NE(autotuner, nullptr);
  for (const char* m : {"SubmitJob", "GetJob", "ListJobs", "WatchJob", "CancelJob",
                        "GetResults", "ListWorkers"}) {
    EXPECT_NE(autotuner->FindMethodByName(m), nullptr) << m;
  }
  EXPECT_TRUE(autotuner->FindMethodByName("WatchJob")->server_streaming());
  const auto* hub = v1::SubmitJobRequest::descriptor()->file()->pool()->FindServiceByName(
      "paratune.v1.WorkerHub");
  ASSERT_NE(hub, nullptr);
  for (const char* m : {"Register", "Heartbeat", "LeaseTask", "ReportResult", "Deregister"}) {
    EXPECT_NE(hub->FindMethodByName(m), nullptr) << m;
  }
}

}  // namespace
}  // namespace paratune
