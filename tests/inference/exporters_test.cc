#include "inference/exporters.h"

#include <gtest/gtest.h>

#include "inference/spec_io.h"

namespace paratune::inference {
namespace {

InferenceJobSpec Spec() {
  auto s = InferenceJobSpecFromJson(nlohmann::json::parse(R"({
    "kind": "inference", "name": "chat",
    "model": {"preset": "llama3-70b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
    "serving": {"isl": 2048, "osl": 128}
  })"));
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

ServingConfig Layout() {
  ServingConfig c;
  c.tp = 4;
  c.pp = 1;
  c.replicas = 2;
  c.max_batch_size = 256;
  c.max_num_tokens = 8192;
  c.weight_precision = QuantFormat::kFp8;
  c.kv_cache_precision = QuantFormat::kFp8;
  return c;
}

std::string LastLine(const std::string& text, const std::string& prefix) {
  std::string found;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (line.rfind(prefix, 0) == 0) found = line;
    start = end + 1;
  }
  return found;
}

TEST(ServingExportersTest, VllmServeArguments) {
  auto text = FormatServingCommand(Spec(), Layout(), "vllm");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(LastLine(*text, "vllm serve"),
            "vllm serve $MODEL --tensor-parallel-size 4 --pipeline-parallel-size 1 "
            "--max-num-seqs 256 --max-num-batched-tokens 8192 --enable-chunked-prefill "
            "--gpu-memory-utilization 0.90 --kv-cache-dtype fp8 --quantization fp8 "
            "--data-parallel-size 2");
}

TEST(ServingExportersTest, SglangLaunchServerArguments) {
  auto text = FormatServingCommand(Spec(), Layout(), "sglang");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(LastLine(*text, "python3 -m sglang.launch_server"),
            "python3 -m sglang.launch_server --model-path $MODEL --tp-size 4 --pp-size 1 "
            "--max-running-requests 256 --chunked-prefill-size 8192 --mem-fraction-static 0.88 "
            "--kv-cache-dtype fp8_e4m3 --quantization fp8 --dp-size 2");
}

TEST(ServingExportersTest, TrtllmServeAndBenchOptions) {
  auto text = FormatServingCommand(Spec(), Layout(), "trtllm");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(LastLine(*text, "trtllm-serve"),
            "trtllm-serve $MODEL --backend pytorch --tp_size 4 --pp_size 1 --max_batch_size 256 "
            "--max_num_tokens 8192 --kv_cache_free_gpu_memory_fraction 0.90 "
            "--extra_llm_api_options extra_llm_api_options.yaml");
  EXPECT_EQ(LastLine(*text, "trtllm-bench"),
            "trtllm-bench --model $MODEL throughput --dataset dataset.jsonl --backend pytorch "
            "--tp 4 --pp 1 --max_batch_size 256 --max_num_tokens 8192 "
            "--kv_cache_free_gpu_mem_fraction 0.90 --extra_llm_api_options "
            "extra_llm_api_options.yaml");
  EXPECT_NE(text->find("kv_cache_config:\n  dtype: fp8\n"), std::string::npos);
}

TEST(ServingExportersTest, DisaggregatedPoolsGetOneCommandEach) {
  ServingConfig c = Layout();
  c.disaggregated = true;
  c.prefill_replicas = 1;
  c.decode_replicas = 1;
  auto text = FormatServingCommand(Spec(), c, "sglang");
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("--disaggregation-mode prefill\n"), std::string::npos);
  EXPECT_NE(text->find("--disaggregation-mode decode\n"), std::string::npos);
}

InferenceJobSpec MixtralSpec() {
  auto s = InferenceJobSpecFromJson(nlohmann::json::parse(R"({
    "kind": "inference", "name": "moe",
    "model": {"preset": "mixtral-8x7b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
    "serving": {"isl": 2048, "osl": 128}
  })"));
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

// tp 4 with ep 2: two expert groups of two ranks (moe_tp_size 2).
TEST(ServingExportersTest, ExpertParallelSizeInEachEngine) {
  ServingConfig c = Layout();
  c.ep = 2;
  auto trtllm = FormatServingCommand(MixtralSpec(), c, "trtllm");
  ASSERT_TRUE(trtllm.ok()) << trtllm.status();
  EXPECT_NE(trtllm->find("enable_chunked_prefill: true\nmoe_expert_parallel_size: 2\n"
                         "moe_tensor_parallel_size: 2\nEOF\n"),
            std::string::npos)
      << *trtllm;
  EXPECT_EQ(LastLine(*trtllm, "trtllm-serve"),
            "trtllm-serve $MODEL --backend pytorch --tp_size 4 --pp_size 1 --ep_size 2 "
            "--max_batch_size 256 --max_num_tokens 8192 --kv_cache_free_gpu_memory_fraction 0.90 "
            "--extra_llm_api_options extra_llm_api_options.yaml");
  auto sglang = FormatServingCommand(MixtralSpec(), c, "sglang");
  ASSERT_TRUE(sglang.ok()) << sglang.status();
  EXPECT_EQ(LastLine(*sglang, "python3 -m sglang.launch_server"),
            "python3 -m sglang.launch_server --model-path $MODEL --tp-size 4 --pp-size 1 "
            "--ep-size 2 --max-running-requests 256 --chunked-prefill-size 8192 "
            "--mem-fraction-static 0.88 --kv-cache-dtype fp8_e4m3 --quantization fp8 --dp-size 2");
  // vLLM's expert-parallel group is tp x dp: ep 2 inside tp 4 has no vllm form.
  auto vllm = FormatServingCommand(MixtralSpec(), c, "vllm");
  ASSERT_FALSE(vllm.ok());
  EXPECT_EQ(vllm.status().message(),
            "ep (2) with tp (4) has no vllm export: --enable-expert-parallel sets the "
            "expert-parallel size to tp x dp (ep = tp only)");
  // ep = tp: one server per instance, so that the group stays inside it.
  c.ep = 4;
  vllm = FormatServingCommand(MixtralSpec(), c, "vllm");
  ASSERT_TRUE(vllm.ok()) << vllm.status();
  EXPECT_NE(vllm->find("# one per instance (2)\n"), std::string::npos) << *vllm;
  EXPECT_EQ(LastLine(*vllm, "vllm serve"),
            "vllm serve $MODEL --tensor-parallel-size 4 --pipeline-parallel-size 1 "
            "--max-num-seqs 256 --max-num-batched-tokens 8192 --enable-chunked-prefill "
            "--gpu-memory-utilization 0.90 --kv-cache-dtype fp8 --quantization fp8 "
            "--enable-expert-parallel");
}

// tp 8 with attention data parallelism: eight attention ranks, the experts over ep = 8.
TEST(ServingExportersTest, AttentionDataParallelismInEachEngine) {
  ServingConfig c = Layout();
  c.tp = 8;
  c.ep = 8;
  c.replicas = 1;
  c.attention_dp = true;
  auto trtllm = FormatServingCommand(MixtralSpec(), c, "trtllm");
  ASSERT_TRUE(trtllm.ok()) << trtllm.status();
  EXPECT_NE(trtllm->find("moe_expert_parallel_size: 8\nmoe_tensor_parallel_size: 1\n"
                         "enable_attention_dp: true\nEOF\n"),
            std::string::npos)
      << *trtllm;
  auto vllm = FormatServingCommand(MixtralSpec(), c, "vllm");
  ASSERT_TRUE(vllm.ok()) << vllm.status();
  EXPECT_EQ(LastLine(*vllm, "vllm serve"),
            "vllm serve $MODEL --tensor-parallel-size 1 --data-parallel-size 8 "
            "--pipeline-parallel-size 1 --max-num-seqs 256 --max-num-batched-tokens 8192 "
            "--enable-chunked-prefill --gpu-memory-utilization 0.90 --kv-cache-dtype fp8 "
            "--quantization fp8 --enable-expert-parallel");
  // SGLang divides the running-request and chunk limits over the dp ranks: 8 x 256, 8 x 8192.
  auto sglang = FormatServingCommand(MixtralSpec(), c, "sglang");
  ASSERT_TRUE(sglang.ok()) << sglang.status();
  EXPECT_EQ(LastLine(*sglang, "python3 -m sglang.launch_server"),
            "python3 -m sglang.launch_server --model-path $MODEL --tp-size 8 --pp-size 1 "
            "--ep-size 8 --enable-dp-attention --dp-size 8 --max-running-requests 2048 "
            "--chunked-prefill-size 65536 --mem-fraction-static 0.88 --kv-cache-dtype fp8_e4m3 "
            "--quantization fp8");
}

TEST(ServingExportersTest, UnknownFormatListsTheKnownOnes) {
  auto text = FormatServingCommand(Spec(), Layout(), "tgi");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().message(),
            "--format tgi is not a serving export; use one of trtllm, vllm, sglang");
}

}  // namespace
}  // namespace paratune::inference
