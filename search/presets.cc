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
  m.ffn_hidden_size = ffn;
  m.vocab_size = vocab;
  m.activation = Activation::kSwiglu;
  m.normalization = Normalization::kRmsNorm;
  m.tie_embeddings = false;
  m.position_embedding = PositionEmbedding::kRope;
  m.max_position_embeddings = 0;
  return m;
}

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
  nemotron.activation = Activation::kGelu;
  nemotron.normalization = Normalization::kLayerNorm;
  v.push_back(nemotron);
  ModelSpec bloom = Gpt("bloom-176b", 70, 14336, 112);
  bloom.vocab_size = 250880;
  bloom.position_embedding = PositionEmbedding::kRope;
  bloom.max_position_embeddings = 0;
  v.push_back(bloom);
  // Serving presets (inference/): the HF config.json of meta-llama/Llama-3.1-8B, -70B,
  // Llama-3.3-70B-Instruct (the 3.1 70B architecture), mistralai/Mistral-7B-v0.1 (32 layers,
  // 4096 hidden, 32 heads, 8 KV heads, 14336 FFN, 32000 vocab), Qwen/Qwen3-32B (64 layers,
  // 5120 hidden, 64 heads, 8 KV heads, 25600 FFN, 151936 vocab; its head_dim is 128, not
  // 5120/64 = 80: the spec's head_dim is hidden/heads, so its attention projections and
  // its KV cache are modelled 37 % smaller than they are, 7 % of the parameters).
  v.push_back(Llama("llama3.1-8b", 32, 4096, 32, 8, 14336, 128256));
  v.push_back(Llama("llama3.1-70b", 80, 8192, 64, 8, 28672, 128256));
  v.push_back(Llama("llama3.3-70b", 80, 8192, 64, 8, 28672, 128256));
  v.push_back(Llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000));
  v.push_back(Llama("qwen3-32b", 64, 5120, 64, 8, 25600, 151936));
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
