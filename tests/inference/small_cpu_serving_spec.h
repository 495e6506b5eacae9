// deploy/examples/small-llama-cpu-serving-profile.yaml in JSON form: a 2-layer Llama-style
// model served on two CPU ranks in profile mode, shared by the serving-profile tests.
#ifndef PARATUNE_TESTS_INFERENCE_SMALL_CPU_SERVING_SPEC_H_
#define PARATUNE_TESTS_INFERENCE_SMALL_CPU_SERVING_SPEC_H_

namespace paratune::test_specs {

inline constexpr char kSmallCpuServingSpec[] = R"({
    "kind": "inference", "name": "small-llama-cpu-serving",
    "model": {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 8,
              "num_query_groups": 4, "ffn_hidden_size": 704, "vocab_size": 2048,
              "activation": "swiglu", "normalization": "rmsnorm", "position_embedding": "rope"},
    "cluster": {"gpu": "cpu", "num_gpus": 2, "gpus_per_node": 2},
    "serving": {"engine": "trtllm", "isl": 64, "osl": 16, "concurrency": 8, "num_requests": 24},
    "search": {"tp": [1, 2], "pp": [1], "replicas": [1], "max_batch_size": [4, 16],
               "max_num_tokens": [256], "weight_precision": ["int8"],
               "kv_cache_precision": ["bf16"], "disaggregated": [false], "mode": "profile",
               "top_k": 4}})";

}  // namespace paratune::test_specs

#endif  // PARATUNE_TESTS_INFERENCE_SMALL_CPU_SERVING_SPEC_H_
