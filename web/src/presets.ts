// Choices offered by the submit form. Presets are resolved by the coordinator
// (search/presets.cc, same names and layer counts); the layer counts here only serve the client-side exports
// (Megatron's --num-layers-per-virtual-pipeline-stage) when the job spec carries a preset
// name instead of explicit sizes. Any other preset name can be typed into the form.
export const PRESET_LAYERS: Record<string, number> = {
  'gpt3-175b': 96,
  'gpt3-1.7b': 24,
  'gpt3-3.6b': 30,
  'gpt3-7.5b': 36,
  'gpt3-18.4b': 40,
  'gpt3-39.1b': 48,
  'gpt3-76.1b': 60,
  'gpt3-145.6b': 80,
  'gpt3-310.1b': 96,
  'gpt3-529.6b': 105,
  'gpt3-1t': 128,
  'gpt3-5b': 24,
  'gpt3-20b': 44,
  'gpt3-22b': 48,
  'gpt3-530b': 105,
  'llama2-7b': 32,
  'llama2-13b': 40,
  'llama2-70b': 80,
  'llama3-8b': 32,
  'llama3-70b': 80,
  'llama3.1-405b': 126,
  'nemotron-340b': 96,
  'bloom-176b': 70,
};

export const PRESET_NAMES = Object.keys(PRESET_LAYERS);

export const GPU_KINDS = ['a100-40gb', 'a100-80gb', 'h100-sxm-80gb', 'h200-141gb', 'b200-192gb', 'cpu'];

export const PRECISIONS = ['bf16', 'fp16', 'fp8', 'fp32'];
