// Model presets. Sources:
//  - gpt3-1.7b ... gpt3-1t: Narayanan et al. 2021 (SC21) Table 1 weak-scaling models, shapes
//    from Megatron-LM examples/sc21/CONFIG.sh (GPT: f = 4h, V = 51200, learned positions,
//    2048 tokens, tied embeddings); gpt3-1t is the 1008B row.
//  - gpt3-5b, gpt3-20b: NeMo GPT-3 configs (conf/training/gpt3/5b.yaml, 20b.yaml).
//  - gpt3-22b, gpt3-175b, gpt3-530b: Korthikanti et al. 2022 Table 3 (175B = GPT-3,
//    Brown et al. 2020; 530B = MT-NLG).
//  - llama2-*: Touvron et al. 2023 and the HF config.json of meta-llama/Llama-2-*-hf.
//  - llama3-8b, llama3-70b, llama3.1-405b: HF config.json of meta-llama/Meta-Llama-3-8B,
//    -70B and Llama-3.1-405B.
//  - nemotron-340b: NVIDIA Nemotron-4 340B technical report (2024), Table 1 (squared-ReLU
//    MLP with two matrices: modelled as the two-matrix "gelu" MLP; same counts).
//  - nemotron-8b, nemotron-22b: NVIDIA NeMo-Framework-Launcher's training configs
//    (launcher_scripts/conf/training/nemotron/nemotron_8b.yaml, nemotron_22b.yaml): 32
//    layers of 4096 / 40 of 6144, 32 / 48 heads (multi-head attention), FFN 4h with squared
//    ReLU, LayerNorm (layernorm1p), RoPE, no biases, untied embeddings; the Nemotron
//    SentencePiece vocabulary of 256,000 (Nemotron-3 8B's config.json).
//  - mixtral-8x7b, mixtral-8x22b: HF config.json of mistralai/Mixtral-8x7B-v0.1 and
//    Mixtral-8x22B-v0.1 (8 experts, top-2; 46.7B / 12.9B and 141B / 39B published).
//  - qwen3-30b-a3b, qwen3-235b-a22b: HF config.json of Qwen/Qwen3-30B-A3B and
//    Qwen3-235B-A22B (128 experts, top-8, head_dim 128).
//  - deepseek-v3: HF config.json of deepseek-ai/DeepSeek-V3 (MLA, 256 routed + 1 shared
//    expert, top-8, first 3 layers dense, one MTP module; 671B / 37B published).
//  - kimi-k2: HF config.json of moonshotai/Kimi-K2-Instruct (DeepSeek-V3's architecture with
//    384 routed experts, 64 heads, first layer dense, vocab 163840, no MTP; 1.04T / 32B
//    published).
//  - moonlight-16b-a3b: HF config.json of moonshotai/Moonlight-16B-A3B (DeepSeek-V3's
//    architecture; "16B total, 3B activated" published).
//  - glm-4.5, glm-4.5-air: HF config.json of zai-org/GLM-4.5 and GLM-4.5-Air (160 / 128
//    routed experts of 1536 / 1408, top-8, one shared expert, first 3 / 1 layers dense, one
//    MTP module; 355B / 32B and 106B / 12B published). Its QKV biases and QK norm are not
//    modelled.
//  - gpt-oss-120b: HF config.json of openai/gpt-oss-120b (128 experts, top-4, head_dim 64,
//    a 128-token sliding window in every other layer; 116.8B / 5.1B published; its
//    attention sinks and biases are not modelled).
//  - bloom-176b: BigScience BLOOM paper (2022) and bigscience/bloom config.json (ALiBi: no
//    position table, modelled as kRope i.e. no learned positions).
#include "search/presets.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace paratune {
namespace {

ModelSpec Gpt(const char* name, int64_t layers, int64_t hidden, int64_t heads) {
  ModelSpec m;
  m.name = name;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_attention_heads = heads;
  m.num_query_groups = heads;
  m.ffn_hidden_size = 4 * hidden;
  m.vocab_size = 51200;
  m.activation = Activation::kGelu;
  m.normalization = Normalization::kLayerNorm;
  m.tie_embeddings = true;
  m.position_embedding = PositionEmbedding::kLearned;
  m.max_position_embeddings = 2048;
  return m;
}

ModelSpec Llama(const char* name, int64_t layers, int64_t hidden, int64_t heads,
                int64_t groups, int64_t ffn, int64_t vocab) {
  ModelSpec m;
  m.name = name;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_attention_heads = heads;
  m.num_query_groups = groups;
  m.attention = groups == heads ? AttentionType::kMha : AttentionType::kGqa;
  m.ffn_hidden_size = ffn;
  m.vocab_size = vocab;
  m.activation = Activation::kSwiglu;
  m.normalization = Normalization::kRmsNorm;
  m.tie_embeddings = false;
  m.position_embedding = PositionEmbedding::kRope;
  m.max_position_embeddings = 0;
  return m;
}

std::vector<ModelSpec> MoePresets();

std::vector<ModelSpec> All() {
  std::vector<ModelSpec> v = {
      Gpt("gpt3-1.7b", 24, 2304, 24),     Gpt("gpt3-3.6b", 30, 3072, 32),
      Gpt("gpt3-7.5b", 36, 4096, 32),     Gpt("gpt3-18.4b", 40, 6144, 48),
      Gpt("gpt3-39.1b", 48, 8192, 64),    Gpt("gpt3-76.1b", 60, 10240, 80),
      Gpt("gpt3-145.6b", 80, 12288, 96),  Gpt("gpt3-310.1b", 96, 16384, 128),
      Gpt("gpt3-529.6b", 105, 20480, 128), Gpt("gpt3-1t", 128, 25600, 160),
      Gpt("gpt3-5b", 24, 4096, 32),       Gpt("gpt3-20b", 44, 6144, 48),
      Gpt("gpt3-22b", 48, 6144, 64),      Gpt("gpt3-175b", 96, 12288, 96),
      Gpt("gpt3-530b", 105, 20480, 128),
      Llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000),
      Llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000),
      Llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000),
      Llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256),
      Llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256),
      Llama("llama3.1-405b", 126, 16384, 128, 8, 53248, 128256),
  };
  ModelSpec nemotron = Llama("nemotron-340b", 96, 18432, 96, 8, 73728, 256000);
  nemotron.activation = Activation::kSquaredRelu;  // Nemotron-4 340B technical report.
  nemotron.normalization = Normalization::kLayerNorm;
  v.push_back(nemotron);
  for (ModelSpec small : {Llama("nemotron-8b", 32, 4096, 32, 32, 16384, 256000),
                          Llama("nemotron-22b", 40, 6144, 48, 48, 24576, 256000)}) {
    small.activation = Activation::kSquaredRelu;
    small.normalization = Normalization::kLayerNorm;
    v.push_back(small);
  }
  ModelSpec bloom = Gpt("bloom-176b", 70, 14336, 112);
  bloom.vocab_size = 250880;
  bloom.position_embedding = PositionEmbedding::kRope;
  bloom.max_position_embeddings = 0;
  v.push_back(bloom);
  // Serving presets (inference/): the HF config.json of meta-llama/Llama-3.1-8B, -70B,
  // Llama-3.3-70B-Instruct (the 3.1 70B architecture), mistralai/Mistral-7B-v0.1 (32 layers,
  // 4096 hidden, 32 heads, 8 KV heads, 14336 FFN, 32000 vocab), Qwen/Qwen3-32B (64 layers,
  // 5120 hidden, 64 heads, 8 KV heads, head_dim 128, 25600 FFN, 151936 vocab).
  v.push_back(Llama("llama3.1-8b", 32, 4096, 32, 8, 14336, 128256));
  v.push_back(Llama("llama3.1-70b", 80, 8192, 64, 8, 28672, 128256));
  v.push_back(Llama("llama3.3-70b", 80, 8192, 64, 8, 28672, 128256));
  v.push_back(Llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000));
  ModelSpec qwen3 = Llama("qwen3-32b", 64, 5120, 64, 8, 25600, 151936);
  qwen3.kv_channels = 128;
  v.push_back(qwen3);
  // The HF config.json of EleutherAI/gpt-j-6b (28 layers, 4096 hidden, 16 heads of 256,
  // rotary on 64 of each head's dims, f = 4h, GELU, LayerNorm, vocab 50400, an untied
  // output layer) and of tiiuae/falcon-180B (80 layers, 14848 hidden, 232 heads of 64, 8
  // KV heads, f = 4h, GELU, LayerNorm, rotary, vocab 65024, tied embeddings). Both run the
  // attention and the MLP in parallel from one input; the layer's work is the same.
  ModelSpec gptj = Llama("gpt-j-6b", 28, 4096, 16, 16, 16384, 50400);
  gptj.activation = Activation::kGelu;
  gptj.normalization = Normalization::kLayerNorm;
  v.push_back(gptj);
  ModelSpec falcon = Llama("falcon-180b", 80, 14848, 232, 8, 59392, 65024);
  falcon.activation = Activation::kGelu;
  falcon.normalization = Normalization::kLayerNorm;
  falcon.tie_embeddings = true;
  v.push_back(falcon);
  for (ModelSpec& m : MoePresets()) v.push_back(std::move(m));
  return v;
}

// A mixture-of-experts model: Llama-style layers whose FFN is `experts` routed experts of
// width `moe_ffn`, `topk` per token.
ModelSpec Moe(const char* name, int64_t layers, int64_t hidden, int64_t heads, int64_t groups,
              int64_t head_dim, int64_t vocab, int64_t experts, int64_t topk, int64_t moe_ffn) {
  ModelSpec m = Llama(name, layers, hidden, heads, groups, moe_ffn, vocab);
  m.kv_channels = head_dim;
  m.num_experts = experts;
  m.moe_router_topk = topk;
  m.moe_ffn_hidden_size = moe_ffn;
  return m;
}

std::vector<ModelSpec> MoePresets() {
  std::vector<ModelSpec> v = {
      Moe("mixtral-8x7b", 32, 4096, 32, 8, 0, 32000, 8, 2, 14336),
      Moe("mixtral-8x22b", 56, 6144, 48, 8, 0, 32768, 8, 2, 16384),
      Moe("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 151936, 128, 8, 768),
      Moe("qwen3-235b-a22b", 94, 4096, 64, 4, 128, 151936, 128, 8, 1536),
      Moe("gpt-oss-120b", 36, 2880, 64, 8, 64, 201088, 128, 4, 2880),
  };
  // GPT-OSS alternates a 128-token sliding window (even layers) and full attention.
  v.back().sliding_window = 128;
  v.back().window_attn_skip_freq = 2;
  ModelSpec dsv3 = Moe("deepseek-v3", 61, 7168, 128, 128, 0, 129280, 256, 8, 2048);
  dsv3.ffn_hidden_size = 18432;  // The first three (dense) layers.
  dsv3.attention = AttentionType::kMla;
  dsv3.q_lora_rank = 1536;
  dsv3.kv_lora_rank = 512;
  dsv3.qk_head_dim = 128;
  dsv3.qk_rope_head_dim = 64;
  dsv3.v_head_dim = 128;
  dsv3.num_shared_experts = 1;
  dsv3.shared_expert_ffn_hidden_size = 2048;
  dsv3.first_k_dense_layers = 3;
  dsv3.moe_router_num_groups = 8;  // n_group 8, topk_group 4 (node-limited routing)
  dsv3.moe_router_group_topk = 4;
  dsv3.mtp_layers = 1;
  v.push_back(dsv3);
  // DeepSeek-V3's layer with 384 routed experts, 64 heads, one dense layer, no MTP module.
  ModelSpec kimi = dsv3;
  kimi.name = "kimi-k2";
  kimi.num_attention_heads = 64;
  kimi.num_query_groups = 64;
  kimi.vocab_size = 163840;
  kimi.num_experts = 384;
  kimi.first_k_dense_layers = 1;
  kimi.moe_router_num_groups = 0;  // n_group 1: not limited
  kimi.moe_router_group_topk = 0;
  kimi.mtp_layers = 0;
  v.push_back(kimi);
  // DeepSeek-V3's layer at 2048 hidden: 16 heads without a query low-rank (q_lora_rank
  // null), 64 routed experts of 1408 (top-6, scaling 2.446), 2 shared, a dense first layer
  // of FFN 11264, 27 layers, untied vocab 163840, no MTP.
  ModelSpec moon = dsv3;
  moon.name = "moonlight-16b-a3b";
  moon.num_layers = 27;
  moon.hidden_size = 2048;
  moon.num_attention_heads = 16;
  moon.num_query_groups = 16;
  moon.ffn_hidden_size = 11264;
  moon.vocab_size = 163840;
  moon.q_lora_rank = 0;
  moon.num_experts = 64;
  moon.moe_router_topk = 6;
  moon.moe_ffn_hidden_size = 1408;
  moon.num_shared_experts = 2;
  moon.shared_expert_ffn_hidden_size = 1408;
  moon.first_k_dense_layers = 1;
  moon.moe_router_num_groups = 0;  // n_group 1: not limited
  moon.moe_router_group_topk = 0;
  moon.mtp_layers = 0;
  v.push_back(moon);
  // GLM-4.5 and GLM-4.5-Air: grouped-query attention (96 heads of 128, 8 groups), one shared
  // expert, the first layers dense, one MTP module.
  ModelSpec glm = Moe("glm-4.5", 92, 5120, 96, 8, 128, 151552, 160, 8, 1536);
  glm.ffn_hidden_size = 12288;  // The first three (dense) layers.
  glm.num_shared_experts = 1;
  glm.shared_expert_ffn_hidden_size = 1536;
  glm.first_k_dense_layers = 3;
  glm.mtp_layers = 1;
  v.push_back(glm);
  ModelSpec air = glm;
  air.name = "glm-4.5-air";
  air.num_layers = 46;
  air.hidden_size = 4096;
  air.ffn_hidden_size = 10944;
  air.num_experts = 128;
  air.moe_ffn_hidden_size = 1408;
  air.shared_expert_ffn_hidden_size = 1408;
  air.first_k_dense_layers = 1;
  v.push_back(air);
  return v;
}

}  // namespace

absl::StatusOr<ModelSpec> FindPreset(const std::string& name) {
  for (ModelSpec& m : All()) {
    if (m.name == name) return m;
  }
  return absl::NotFoundError(absl::StrFormat("unknown model preset \"%s\"; known: %s", name,
                                             absl::StrJoin(PresetNames(), ", ")));
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const ModelSpec& m : All()) names.push_back(m.name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace paratune
