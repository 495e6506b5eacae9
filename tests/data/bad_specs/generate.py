#!/usr/bin/env python3
"""Writes the bad-spec corpus (cases/*.json|yaml) and manifest.tsv from one table.

Run from anywhere: python3 tests/data/bad_specs/generate.py. The output is committed; this
script is how it was made (edit the table, re-run, commit both).

Each case is the valid BASE spec with one mutation, or raw text. manifest.tsv columns:
  file        cases/<name>.json or .yaml
  transports  r = REST POST /v1/jobs, g = gRPC SubmitJob (the JSON converted to a JobSpec
              proto by the test; only cases the typed proto can express), p = `paratune plan
              --spec FILE` (exit 2)
  expect      a substring the error message must contain: the field (path) it names
  rule        what the case breaks, in words
"""
import copy
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = {
    "name": "bad-input-base",
    "model": {"name": "tiny", "num_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
              "vocab_size": 256},
    "training": {"seq_length": 64, "global_batch_size": 8, "precision": "fp32"},
    "cluster": {"gpu": "a100-80gb", "num_gpus": 8, "gpus_per_node": 8},
    "search": {"mode": "model", "top_k": 4},
}
DEL = object()
I64_MAX = 9223372036854775807

cases = []  # (name, transports, expect, rule, content: dict of path->value | str raw, ext)


def mut(name, transports, expect, rule, **paths):
    cases.append((name, transports, expect, rule, paths, "json"))


def raw(name, transports, expect, rule, text, ext="json"):
    cases.append((name, transports, expect, rule, text, ext))


def setp(spec, path, value):
    keys = path.split(".")
    node = spec
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    if value is DEL:
        node.pop(keys[-1], None)
    else:
        node[keys[-1]] = value


# Sizes: zero, negative, over the bound, int64 edge, overflow of int64.
SIZES = [("model.num_layers", 16384), ("model.hidden_size", 1048576),
         ("model.ffn_hidden_size", 4194304), ("model.vocab_size", 16777216),
         ("training.seq_length", 16777216), ("training.global_batch_size", 16777216),
         ("cluster.num_gpus", 1048576), ("cluster.gpus_per_node", 1024),
         ("search.top_k", 100000)]
# 0 means "the default" for ffn_hidden_size (4h), gpus_per_node (8) and top_k (10).
DEFAULT_ZERO = {"model.ffn_hidden_size", "cluster.gpus_per_node", "search.top_k"}
for path, bound in SIZES:
    short = path.replace(".", "_")
    if path not in DEFAULT_ZERO:
        mut(f"{short}_zero", "rgp", path, "must be positive", **{path: 0})
    mut(f"{short}_negative", "rgp", path, "must be positive", **{path: -1})
    mut(f"{short}_over_bound", "rgp", path, "at most the bound", **{path: bound + 1})
    mut(f"{short}_int64_max", "rgp", path, "int64 max: overflows the models", **{path: I64_MAX})
    mut(f"{short}_string", "rp", path, "wrong type (string)", **{path: "many"})
    mut(f"{short}_fraction", "rp", path, "wrong type (non-integral number)", **{path: 2.5})
# hidden_size zero is caught as 'must be positive' before divisibility; heads:
mut("num_attention_heads_zero", "rgp", "model.num_attention_heads", "must be positive",
    **{"model.num_attention_heads": 0})
mut("num_attention_heads_negative", "rgp", "model.num_attention_heads", "must be positive",
    **{"model.num_attention_heads": -4})
mut("num_query_groups_negative", "rgp", "model.num_query_groups", "must be positive",
    **{"model.num_query_groups": -2})
mut("num_experts_negative", "rgp", "model.num_experts", "must not be negative",
    **{"model.num_experts": -1})
mut("num_experts_moe", "rgp", "model.num_experts", "experts without moe_router_topk",
    **{"model.num_experts": 8})
# Group-limited routing.
MOE = {"model.num_experts": 8, "model.moe_router_topk": 2, "model.moe_ffn_hidden_size": 128}
mut("router_groups_dense", "rgp", "model.moe_router_num_groups",
    "router groups on a dense model",
    **{"model.moe_router_num_groups": 2, "model.moe_router_group_topk": 1})
mut("router_groups_not_dividing_experts", "rgp", "model.moe_router_num_groups",
    "groups must divide the experts",
    **MOE, **{"model.moe_router_num_groups": 3, "model.moe_router_group_topk": 1})
mut("router_group_topk_without_groups", "rgp", "model.moe_router_group_topk",
    "group top-k without groups", **MOE, **{"model.moe_router_group_topk": 1})
mut("router_group_topk_over_groups", "rgp", "model.moe_router_group_topk",
    "group top-k above the groups",
    **MOE, **{"model.moe_router_num_groups": 4, "model.moe_router_group_topk": 5})
mut("router_groups_too_few_experts", "rgp", "model.moe_router_topk",
    "top-k above the experts of the chosen groups",
    **MOE, **{"model.moe_router_num_groups": 8, "model.moe_router_group_topk": 1})
mut("total_tokens_negative", "rgp", "training.total_tokens", "must not be negative",
    **{"training.total_tokens": -5})
# Values past int64 (JSON numbers and strings).
for path in ["model.num_layers", "cluster.num_gpus", "training.global_batch_size"]:
    short = path.replace(".", "_")
    mut(f"{short}_past_int64", "rp", path, "overflows int64 (2^63)",
        **{path: 9223372036854775808})
    mut(f"{short}_1e30", "rp", path, "1e30 overflows int64", **{path: 1e30})
    mut(f"{short}_string_past_int64", "rp", path, "decimal string past int64",
        **{path: "99999999999999999999999"})
# Every divisibility and product rule.
mut("hidden_not_divisible_by_heads", "rgp", "model.num_attention_heads",
    "hidden_size % heads", **{"model.num_attention_heads": 5})
mut("heads_not_divisible_by_query_groups", "rgp", "model.num_query_groups",
    "heads % query groups", **{"model.num_query_groups": 3})
mut("num_gpus_not_multiple_of_node", "rgp", "cluster.gpus_per_node",
    "num_gpus % gpus_per_node when > 1 node", **{"cluster.num_gpus": 12})
mut("degrees_do_not_multiply", "rgp", "cluster.num_gpus", "tp*pp*cp*dp == num_gpus",
    **{"search.tp": [2], "search.pp": [2], "search.cp": [1], "search.dp": [1]})
mut("degree_lists_do_not_multiply", "rgp", "cluster.num_gpus", "no combination multiplies",
    **{"search.tp": [2, 4], "search.pp": [4], "search.cp": [1], "search.dp": [3, 5]})
mut("tp_over_num_gpus", "rgp", "search.tp", "tp <= num_gpus", **{"search.tp": [16]})
mut("pp_over_num_layers", "rgp", "search.pp", "pp <= num_layers", **{"search.pp": [8]})
mut("mbs_over_gbs", "rgp", "search.micro_batch_size", "micro batch <= global batch",
    **{"search.micro_batch_size": [16]})
mut("verify_top_k_over_top_k", "rgp", "search.verify_top_k", "verify_top_k <= top_k",
    **{"search.verify_top_k": 5})
mut("verify_top_k_negative", "rgp", "search.verify_top_k", "must not be negative",
    **{"search.verify_top_k": -1})
mut("recompute_layers_without_full", "rgp", "search.recompute_num_layers",
    "recompute_num_layers needs full", **{"search.recompute": ["selective"],
                                          "search.recompute_num_layers": [1]})
mut("tokens_x_hidden_overflow", "rgp", "training.seq_length", "s*b*h <= 2^56",
    **{"training.seq_length": 16777216, "training.global_batch_size": 16777216,
       "model.hidden_size": 1024, "model.num_attention_heads": 8})
mut("attention_scores_overflow", "rgp", "model.num_attention_heads", "s^2*heads*b <= 2^58",
    **{"training.seq_length": 16777216, "training.global_batch_size": 2048,
       "model.hidden_size": 4096, "model.num_attention_heads": 32})
mut("parameters_over_1e15", "rgp", "parameters", "at most 1e15 parameters",
    **{"model.num_layers": 16384, "model.hidden_size": 1048576,
       "model.num_attention_heads": 8, "model.ffn_hidden_size": 4194304})
# Search lists.
for lst in ["tp", "pp", "dp", "cp", "vp", "micro_batch_size"]:
    mut(f"search_{lst}_zero", "rgp", f"search.{lst}[0]", "list entries must be positive",
        **{f"search.{lst}": [0]})
    mut(f"search_{lst}_duplicate", "rgp", f"search.{lst}", "list lists a value twice",
        **{f"search.{lst}": [1, 1]})
    mut(f"search_{lst}_huge", "rgp", f"search.{lst}[0]", "list entry over 2^20",
        **{f"search.{lst}": [2097152]})
mut("search_tp_list_of_strings", "rp", "search.tp", "wrong element type",
    **{"search.tp": ["two"]})
mut("search_sequence_parallel_duplicate", "rgp", "search.sequence_parallel", "listed twice",
    **{"search.sequence_parallel": [True, True]})
mut("search_recompute_unknown", "rgp", "recompute", "unknown recompute granularity",
    **{"search.recompute": ["partial"]})
mut("search_recompute_duplicate", "rgp", "search.recompute", "listed twice",
    **{"search.recompute": ["full", "full"]})
# Enumerations and names.
mut("unknown_gpu", "rgp", "cluster.gpu", "unknown device kind", **{"cluster.gpu": "tpu-v9"})
mut("missing_gpu", "rgp", "cluster.gpu", "cluster.gpu is required", **{"cluster.gpu": DEL})
mut("gpu_number", "rp", "cluster.gpu", "wrong type (number)", **{"cluster.gpu": 100})
mut("unknown_precision", "rgp", "precision", "unknown precision",
    **{"training.precision": "fp7"})
mut("unknown_framework", "rgp", "training.framework", "unknown training framework",
    **{"training.framework": "megatron-lm"})
mut("framework_without_tp_comm_overlap", "rgp", "search.tp_comm_overlap",
    "an overlap the framework lacks, asked for",
    **{"training.framework": "deepspeed", "search.tp_comm_overlap": [True]})
mut("framework_without_param_gather_overlap", "rgp", "search.overlap_param_gather",
    "an overlap the framework lacks, asked for",
    **{"training.framework": "megatron-deepspeed", "search.overlap_param_gather": [True]})
mut("framework_without_sharding_stage", "rgp", "search.data_parallel_sharding",
    "a sharding stage the framework lacks, asked for",
    **{"training.framework": "llm-foundry", "search.data_parallel_sharding": ["optimizer"]})
mut("unknown_offload_module", "rgp", "training.offload_modules[1]",
    "unknown activation offload module", **{"training.offload_modules": ["core_attn", "mlp"]})
mut("offload_module_repeated", "rgp", "training.offload_modules[1]",
    "an offload module named twice", **{"training.offload_modules": ["attn_proj", "attn_proj"]})
mut("activation_offload_with_only_full_recompute", "rgp", "search.activation_offload",
    "activation offload where every layout recomputes fully",
    **{"search.activation_offload": [True], "search.recompute": ["full"]})
mut("framework_without_expert_tp", "rgp", "search.etp",
    "expert tensor parallelism under a framework that has none",
    **MOE, **{"training.framework": "nemo-automodel", "search.etp": [1, 2]})
mut("framework_without_dispatcher", "rgp", "search.moe_token_dispatcher",
    "a token dispatcher the framework lacks, asked for",
    **MOE, **{"training.framework": "torchtitan", "search.moe_token_dispatcher": ["allgather"]})
mut("activation_offload_without_the_framework", "rgp", "search.activation_offload",
    "activation offload under a framework that has none",
    **{"search.activation_offload": [True], "training.framework": "deepspeed"})
mut("activation_offload_in_profile_mode", "rgp", "search.activation_offload",
    "activation offload in profile mode", **{"search.activation_offload": [True],
                                             "search.mode": "profile"})
mut("cudnn_attention_in_profile_mode", "rgp", "training.attention_kernel cudnn",
    "cuDNN attention named in profile mode (the workers time their own flash kernel)",
    **{"training.attention_kernel": "cudnn", "search.mode": "profile"})
mut("grad_reduce_in_fp32_with_fp32_training", "rgp", "training.grad_reduce_in_fp32",
    "a gradient reduction dtype named for FP32 training",
    **{"training.grad_reduce_in_fp32": False})
mut("grad_reduce_in_fp32_without_the_framework", "rgp", "training.grad_reduce_in_fp32",
    "a gradient reduction dtype under a framework that sets its own",
    **{"training.grad_reduce_in_fp32": False, "training.precision": "bf16",
       "training.framework": "torchtitan"})
mut("grad_reduce_in_fp32_string", "rp", "training.grad_reduce_in_fp32",
    "wrong type (string for a bool)", **{"training.grad_reduce_in_fp32": "no"})
mut("fp8_param_gather_without_fp8", "rgp", "training.fp8_param_gather",
    "FP8 parameters named for FP32 training", **{"training.fp8_param_gather": True})
mut("fp8_param_gather_without_the_framework", "rgp", "training.fp8_param_gather",
    "FP8 parameters under a framework that has none",
    **{"training.fp8_param_gather": True, "training.precision": "fp8",
       "cluster.gpu": "h100-sxm-80gb", "training.framework": "deepspeed"})
mut("fp8_param_gather_number", "rp", "training.fp8_param_gather",
    "wrong type (number for a bool)", **{"training.fp8_param_gather": 1})
mut("optimizer_state_dtype_with_fp32_training", "rgp", "training.optimizer_state_dtype",
    "optimizer state dtypes named for FP32 training",
    **{"training.optimizer_state_dtype": "bf16"})
mut("optimizer_state_dtype_without_the_framework", "rgp", "training.optimizer_state_dtype",
    "a precision-aware optimizer under a framework that has none",
    **{"training.optimizer_state_dtype": "bf16", "training.precision": "bf16",
       "training.framework": "torchtitan"})
mut("optimizer_state_dtype_unknown", "rgp", "training.optimizer_state_dtype",
    "an optimizer state dtype the precision-aware optimizer does not take",
    **{"training.optimizer_state_dtype": "mxfp8", "training.precision": "bf16"})
mut("optimizer_state_dtype_number", "rp", "training.optimizer_state_dtype",
    "wrong type (number for a string)", **{"training.optimizer_state_dtype": 16})
mut("activation_offload_duplicate", "rgp", "search.activation_offload",
    "a search list value twice", **{"search.activation_offload": [True, True]})
mut("activation_offload_string", "rp", "search.activation_offload",
    "wrong type (string in a bool list)", **{"search.activation_offload": ["yes"]})
mut("unknown_activation", "rgp", "activation", "unknown activation",
    **{"model.activation": "relu6"})
mut("unknown_normalization", "rgp", "normalization", "unknown normalization",
    **{"model.normalization": "batchnorm"})
mut("unknown_position_embedding", "rgp", "position_embedding", "unknown position embedding",
    **{"model.position_embedding": "alibi2"})
mut("unsupported_optimizer", "rgp", "training.optimizer", "only adam",
    **{"training.optimizer": "sgd"})
mut("unknown_objective", "rgp", "objective", "unknown objective",
    **{"search.objective": "cheapest"})
mut("unknown_mode", "rgp", "mode", "unknown search mode", **{"search.mode": "guess"})
mut("unknown_preset", "rgp", "preset", "unknown model preset",
    **{"model.preset": "gpt-9-quadrillion"})
mut("flash_attention_string", "rp", "flash_attention", "wrong type (string for bool)",
    **{"training.flash_attention": "yes"})
# Bandwidth / memory overrides.
for path in ["cluster.nvlink_bandwidth_gbps", "cluster.network_bandwidth_gbps",
             "cluster.memory_gib"]:
    short = path.replace(".", "_")
    mut(f"{short}_negative", "rgp", path, "must not be negative", **{path: -1.0})
    mut(f"{short}_huge", "rgp", path, "over the bound", **{path: 1e300})
    mut(f"{short}_string", "rp", path, "wrong type", **{path: "fast"})
# Unknown fields at each level.
mut("unknown_top_level_field", "rp", "colour", "unknown field", colour="blue")
mut("unknown_model_field", "rp", "hiden_size", "unknown field (typo)",
    **{"model.hiden_size": 64})
mut("unknown_training_field", "rp", "learning_rate", "unknown field",
    **{"training.learning_rate": 0.1})
mut("unknown_cluster_field", "rp", "gpus_per_rack", "unknown field",
    **{"cluster.gpus_per_rack": 4})
mut("unknown_search_field", "rp", "edp", "unknown field", **{"search.edp": [1]})
# Wrong container types.
mut("model_is_a_list", "rp", "model", "section must be an object", model=[1, 2])
mut("cluster_is_a_string", "rp", "cluster", "section must be an object", cluster="dgx")
mut("search_tp_object", "rp", "search.tp|for type tp", "list of objects (protobuf says \"(search): ... for type tp\")", **{"search.tp": {"a": 1}})
mut("hf_config_json_garbage", "rgp", "hf_config", "hf_config_json not JSON",
    **{"model": {"hf_config_json": "{not json"}})
mut("hf_config_json_negative_layers", "rgp", "model.num_layers",
    "HF config with a negative layer count",
    **{"model": {"hf_config_json": json.dumps({
        "model_type": "llama", "num_hidden_layers": -3, "hidden_size": 64,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256})}})
mut("hf_config_json_number_overflow", "rgp", "hf_config", "1e999 in the HF config text "
    "(nlohmann throws out_of_range, not parse_error: once an uncaught exception)",
    **{"model": {"hf_config_json": '{"model_type": "llama", "num_hidden_layers": 1e999}'}})
mut("model_sliding_window_negative", "rgp", "model.sliding_window", "negative window",
    **{"model.sliding_window": -128})
mut("model_window_skip_without_window", "rgp", "model.window_attn_skip_freq",
    "which layers skip a window that does not exist", **{"model.window_attn_skip_freq": 2})
mut("hf_config_json_mamba_hybrid", "rgp", "hf_config.hybrid_override_pattern",
    "a Mamba/attention hybrid (Nemotron-H) would be planned as attention layers only",
    **{"model": {"hf_config_json": json.dumps({
        "model_type": "nemotron_h", "num_hidden_layers": 8, "hidden_size": 64,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256,
        "hybrid_override_pattern": "M-M*-M-M*"})}})
mut("hf_config_json_linear_attention_layers", "rgp", "hf_config.layer_types",
    "linear-attention layers (Qwen3-Next) would be planned as attention layers",
    **{"model": {"hf_config_json": json.dumps({
        "model_type": "qwen3_next", "num_hidden_layers": 2, "hidden_size": 64,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256,
        "layer_types": ["linear_attention", "full_attention"]})}})
# Raw text: truncated and invalid JSON and YAML.
base_text = json.dumps(BASE)
TRAIN = "training: {seq_length: 2048, global_batch_size: 64}\n"
raw("truncated_json_half", "rp", "JSON", "truncated JSON", base_text[: len(base_text) // 2])
raw("truncated_json_one_byte", "rp", "JSON", "last byte missing", base_text[:-1])
raw("json_number_overflow", "rp", "JSON", "1e999 does not fit a double",
    base_text.replace('"num_layers": 4', '"num_layers": 1e999'))
raw("json_trailing_comma", "rp", "JSON", "invalid JSON", '{"model": {"preset": "gpt3-175b",}}')
raw("json_single_quotes", "rp", "JSON", "invalid JSON", "{'model': {}}")
raw("json_nan_literal", "rp", "JSON", "invalid JSON", '{"cluster": {"memory_gib": NaN}}')
raw("json_top_level_array", "rp", "object", "a list, not an object", "[1, 2, 3]")
raw("json_top_level_number", "rp", "object", "a number, not an object", "42")
raw("json_empty", "rp", "JSON", "empty body", "")
raw("json_binary_garbage", "rp", "JSON", "bytes, not text",
    "\u0000\u0001\u00ff\ufffd{{{")
raw("yaml_truncated_flow", "p", "line", "unterminated flow mapping",
    "model: {preset: gpt3-175b\ncluster: {gpu: a100-80gb", "yaml")
raw("yaml_bad_indentation", "p", "line", "bad indentation",
    "model:\n  preset: gpt3-175b\n    bad: 1\n cluster: x\n", "yaml")
raw("yaml_tab_indent", "p", "line", "tab in indentation",
    "model:\n\tpreset: gpt3-175b\n", "yaml")
raw("yaml_duplicate_key", "p", "model.preset", "duplicate mapping key",
    "model:\n  preset: gpt3-175b\n  preset: llama3-8b\ncluster: {gpu: a100-80gb, num_gpus: 8}\n" + TRAIN,
    "yaml")
raw("yaml_unknown_field", "p", "model.num_layerz", "unknown field (typo) in YAML",
    "model: {preset: gpt3-175b, num_layerz: 3}\ncluster: {gpu: a100-80gb, num_gpus: 8}\n" + TRAIN,
    "yaml")
raw("yaml_negative_gpus", "p", "cluster.num_gpus", "negative size in YAML",
    "model: {preset: gpt3-175b}\ncluster: {gpu: a100-80gb, num_gpus: -8}\n" + TRAIN, "yaml")
raw("yaml_overflow_hex", "p", "cluster.num_gpus", "hex integer past int64 in YAML",
    "model: {preset: gpt3-175b}\ncluster: {gpu: a100-80gb, num_gpus: 0xFFFFFFFFFFFFFFFFFF}\n" + TRAIN,
    "yaml")
raw("yaml_inf_memory", "p", "cluster.memory_gib", ".inf memory in YAML",
    "model: {preset: gpt3-175b}\ncluster: {gpu: a100-80gb, num_gpus: 8, memory_gib: .inf}\n" + TRAIN,
    "yaml")
raw("yaml_list_at_top", "p", "object", "a YAML list, not a mapping", "- a\n- b\n", "yaml")
raw("yaml_unknown_gpu", "p", "cluster.gpu", "unknown device in YAML",
    "model: {preset: gpt3-175b}\ncluster: {gpu: h900, num_gpus: 8}\n" + TRAIN, "yaml")




def mutd(name, transports, expect, rule, paths):
    """mut() with the paths as a dict (a path may be "name")."""
    cases.append((name, transports, expect, rule, paths, "json"))


# --- Text and list bounds (search/specs.h, server/limits.h) ---------------------------------
# Names: at most 256 bytes, printable.
for path in ["name", "model.name"]:
    short = path.replace(".", "_")
    mutd(f"{short}_257_bytes", "rgp", path, "name over 256 bytes", {path: "n" * 257})
    for label, ch in [("newline", "\n"), ("nul", "\u0000"), ("escape", "\u001b"),
                      ("delete", "\u007f"), ("tab", "\t"), ("carriage_return", "\r")]:
        mutd(f"{short}_{label}", "rgp", path, f"control character ({label}) in a name",
            {path: f"bad{ch}name"})
    mutd(f"{short}_number", "rp", path, "wrong type (number)", {path: 5})
    # Alternatives: the field path, or protobuf JSON's "(model) name" / "for type name".
    expect = path if "." not in path else "{}|({}) {}|type {}".format(
        path, *path.split("."), path.split(".")[1])
    mutd(f"{short}_list", "rp", expect, "wrong type (list)", {path: ["a"]})
    mutd(f"{short}_object", "rp", expect, "wrong type (object)", {path: {"a": 1}})
    mutd(f"{short}_bool", "rp", path, "wrong type (bool)", {path: True})
# Keywords: at most 64 bytes; over REST and gRPC the bound names the field before the value
# is looked up; the CLI's reader refuses the unknown value, naming the field.
# path -> the word every transport's message names; VALID: a value each accepts.
VALID = {"model.preset": "gpt3-175b", "model.activation": "gelu",
         "model.normalization": "layernorm", "model.position_embedding": "rope",
         "training.precision": "bf16", "training.optimizer": "adam", "cluster.gpu": "a100-80gb",
         "search.objective": "throughput", "search.mode": "model",
         "training.framework": "megatron-core"}
KEYWORDS = {"model.preset": "preset", "model.activation": "activation",
            "model.normalization": "normalization",
            "model.position_embedding": "position_embedding",
            "training.precision": "precision", "training.optimizer": "optimizer",
            "cluster.gpu": "cluster.gpu", "search.objective": "objective",
            "search.mode": "mode", "training.framework": "framework"}
for path, word in KEYWORDS.items():
    short = path.replace(".", "_")
    mutd(f"{short}_65_bytes", "rgp", word, "keyword over 64 bytes", {path: "k" * 65})
    mutd(f"{short}_4k_bytes", "rg", path, "keyword of 4,096 bytes", {path: "k" * 4096})
    mutd(f"{short}_uppercase", "rgp", word, "keywords are lower case",
         {path: VALID[path].upper()})
    mutd(f"{short}_number", "rp", word, "wrong type (number)", {path: 7})
    mutd(f"{short}_list", "rp", "{}|({}) {}".format(word, *path.split(".")),
         "wrong type (list)", {path: ["a"]})
    mutd(f"{short}_zero_width_space", "rgp", word,
         "a valid keyword with a zero-width space (U+200B) after it",
         {path: VALID[path] + "\u200b"})
# Hugging Face config text: at most 24 KiB (checked before it is parsed).
mutd("hf_config_json_over_bound", "rgp", "hf_config", "hf_config_json over 24 KiB",
    {"model": {"hf_config_json": json.dumps({"model_type": "llama",
                                               "pad": "x" * 40000})}})
mutd("hf_config_json_number", "rp", "hf_config", "wrong type (number)",
    {"model": {"hf_config_json": 5}})
mutd("hf_config_json_list_text", "rgp", "hf_config", "a JSON list, not a config",
    {"model": {"hf_config_json": "[1, 2]"}})
mutd("hf_config_json_empty_object", "rgp", "hf_config", "a config without any field",
    {"model": {"hf_config_json": "{}"}})
mutd("hf_config_json_string_layers", "rgp", "hf_config.num_hidden_layers",
    "num_hidden_layers as a string", {"model": {"hf_config_json": json.dumps({
        "model_type": "llama", "num_hidden_layers": "four", "hidden_size": 64,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256})}})
mutd("hf_config_json_moe", "rgp", "hf_config",
     "a mixture-of-experts config without experts per token",
    {"model": {"hf_config_json": json.dumps({
        "model_type": "mixtral", "num_hidden_layers": 4, "hidden_size": 64,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256,
        "num_local_experts": 8})}})
mutd("hf_config_json_not_utf8_escape", "rgp", "hf_config", "a lone surrogate in the text",
    {"model": {"hf_config_json": '{"model_type": "\\ud800"'}})
# Lists: at most 64 entries each, checked before any entry.
LISTS = {"tp": list(range(1, 66)), "pp": list(range(1, 66)), "dp": list(range(1, 66)),
         "cp": list(range(1, 66)), "vp": list(range(1, 66)),
         "micro_batch_size": list(range(1, 66)),
         "recompute_num_layers": list(range(1, 66)),
         "sequence_parallel": [True, False] * 33, "distributed_optimizer": [False, True] * 33,
         "recompute": ["full"] * 65}
for name, values in LISTS.items():
    mutd(f"search_{name}_65_entries", "rgp", f"search.{name}", "list over 64 entries",
        {f"search.{name}": values})
mutd("search_tp_1000_entries", "rgp", "search.tp", "1,000 entries (with as many pp, cp and "
    "dp values the tp x pp x cp x dp walk would be 10^12 steps)",
     {"search.tp": list(range(1, 1001))})
mutd("search_recompute_65_bytes", "rgp", "recompute", "a recompute entry over 64 bytes",
    {"search.recompute": ["f" * 65]})
mutd("search_recompute_number", "rp", "search.recompute|recompute", "wrong element type",
    {"search.recompute": [1]})
for lst in ["tp", "pp", "dp", "cp", "vp", "micro_batch_size", "recompute_num_layers"]:
    mutd(f"search_{lst}_negative", "rgp", f"search.{lst}[0]", "negative list entry",
        {f"search.{lst}": [-2]})
    mutd(f"search_{lst}_int64_max", "rgp", f"search.{lst}[0]", "INT64_MAX list entry",
        {f"search.{lst}": [I64_MAX]})
    mutd(f"search_{lst}_fraction", "rp", f"search.{lst}", "a fraction in the list",
        {f"search.{lst}": [1.5]})
# A device asked for a feature it lacks: FP8 needs FP8 tensor cores (Hopper and later).
for gpu in ["a100-40gb", "a100-80gb", "cpu"]:
    short = gpu.replace("-", "_")
    mutd(f"fp8_on_{short}", "rgp", f"cluster.gpu {gpu}", "fp8 on a device without FP8 units",
        {"cluster.gpu": gpu, "training.precision": "fp8"})
# More numbers: the other int64 and double fields.
for path in ["model.max_position_embeddings", "training.total_tokens", "search.verify_top_k",
             "model.num_query_groups", "model.num_experts"]:
    short = path.replace(".", "_")
    mutd(f"{short}_string", "rp", path, "wrong type (string)", {path: "many"})
    mutd(f"{short}_past_int64", "rp", path, "past int64", {path: 9223372036854775808})
    mutd(f"{short}_fraction", "rp", path, "non-integral number", {path: 0.5})
mutd("max_position_embeddings_negative", "rgp", "model.max_position_embeddings",
    "must not be negative", {"model.max_position_embeddings": -1})
mutd("max_position_embeddings_over_bound", "rgp", "model.max_position_embeddings",
    "at most 2^24", {"model.max_position_embeddings": 16777217})
mutd("max_position_embeddings_int64_max", "rgp", "model.max_position_embeddings",
    "INT64_MAX", {"model.max_position_embeddings": I64_MAX})
mutd("num_query_groups_over_heads", "rgp", "model.num_query_groups",
    "more groups than heads", {"model.num_query_groups": 8})
mutd("num_query_groups_int64_min", "rgp", "model.num_query_groups", "INT64_MIN",
    {"model.num_query_groups": -9223372036854775808})
mutd("num_experts_int64_max", "rgp", "model.num_experts", "INT64_MAX experts",
    {"model.num_experts": I64_MAX})
mutd("verify_top_k_int64_max", "rgp", "search.verify_top_k", "INT64_MAX",
    {"search.verify_top_k": I64_MAX})
mutd("total_tokens_int64_min", "rgp", "training.total_tokens", "INT64_MIN",
    {"training.total_tokens": -9223372036854775808})
for path in ["cluster.nvlink_bandwidth_gbps", "cluster.network_bandwidth_gbps",
             "cluster.memory_gib"]:
    short = path.replace(".", "_")
    mutd(f"{short}_just_over", "rgp", path, "just over the bound (1e6)", {path: 1000001.0})
    mutd(f"{short}_tiny_negative", "rgp", path, "a tiny negative", {path: -1e-300})
    mutd(f"{short}_list", "rp", "{}|({}) {}".format(path, *path.split(".")),
         "wrong type (list)", {path: [1.0]})
# Booleans given as other types (the CLI's reader is strict; protobuf's JSON reader takes
# "true"/"false" strings, so these are CLI only, as flash_attention_string above).
for path in ["training.flash_attention", "training.dropout", "model.tie_embeddings",
             "search.allow_tp_across_nodes"]:
    short = path.replace(".", "_")
    mutd(f"{short}_number_2", "p", path.split(".")[-1], "wrong type (number 2)", {path: 2})
    mutd(f"{short}_list", "rp", path.split(".")[-1], "wrong type (list)", {path: [True]})
    mutd(f"{short}_object", "rp", path.split(".")[-1], "wrong type (object)", {path: {}})
# Sections of the wrong type.
for section in ["training", "search"]:
    mutd(f"{section}_is_a_number", "rp", section, "section must be an object",
        {section: 3})
    mutd(f"{section}_is_a_list", "rp", section, "section must be an object",
        {section: [{}]})
# Deep nesting inside a field (small enough for the body limit).
mutd("name_nested_lists", "rp", "name", "100 levels of lists in a string field",
    {"name": json.loads("[" * 100 + "]" * 100)})
raw("search_tp_deep", "rp", "search.tp|tp", "200 levels of lists in a list field",
    base_text.replace('"top_k": 4', '"top_k": 4, "tp": ' + "[" * 200 + "]" * 200))
# Text that is not UTF-8: in a spec file (JSON and YAML) and in a REST body.
raw("json_latin1_name", "rp", "JSON|UTF-8", "a Latin-1 byte in a JSON string",
    base_text.replace("bad-input-base", "caf\udce9"))
raw("json_overlong_utf8", "rp", "JSON|UTF-8", "an overlong UTF-8 sequence",
    base_text.replace("bad-input-base", "\udcc0\udcaf"))
raw("json_bom_then_garbage", "rp", "JSON", "a byte-order mark and no JSON", "\ufeff\u0000")
raw("yaml_latin1_name", "p", "name is not valid UTF-8", "a Latin-1 byte in YAML",
    "name: caf\udce9\nmodel: {preset: gpt3-175b}\n" + TRAIN +
    "cluster: {gpu: a100-80gb, num_gpus: 8}\n", "yaml")
raw("yaml_latin1_model_name", "p", "name is not valid UTF-8", "a Latin-1 byte in YAML",
    "model: {preset: gpt3-175b, name: caf\udce9}\n" + TRAIN +
    "cluster: {gpu: a100-80gb, num_gpus: 8}\n", "yaml")
# YAML: alias expansion, wrong shapes, hf_config files that are not regular files.
bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
for i in range(1, 9):
    prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
    bomb += f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]\n"
raw("yaml_alias_bomb", "p", "expands to more than 100000 values", "nested aliases, 10^9 "
    "values expanded", bomb + "model: {name: *i}\n", "yaml")
raw("yaml_alias_bomb_in_search", "p", "expands to more than 100000 values",
    "nested aliases under search.tp", bomb + "search: {tp: *i}\n", "yaml")
raw("yaml_hf_config_dev_zero", "p", "model.hf_config: '/dev/zero' is a character device",
    "hf_config names a device", "model: {hf_config: /dev/zero}\n" + TRAIN +
    "cluster: {gpu: a100-80gb, num_gpus: 8}\n", "yaml")
raw("yaml_hf_config_dev_urandom", "p", "model.hf_config: '/dev/urandom' is a character device",
    "hf_config names an endless device", "model: {hf_config: /dev/urandom}\n" + TRAIN +
    "cluster: {gpu: a100-80gb, num_gpus: 8}\n", "yaml")
raw("yaml_hf_config_missing", "p", "model.hf_config", "hf_config names no file",
    "model: {hf_config: /nonexistent/config.json}\n" + TRAIN +
    "cluster: {gpu: a100-80gb, num_gpus: 8}\n", "yaml")
raw("yaml_hf_config_number", "p", "hf_config", "hf_config is a number",
    "model: {hf_config: 5}\n" + TRAIN + "cluster: {gpu: a100-80gb, num_gpus: 8}\n", "yaml")
raw("yaml_model_scalar", "p", "model", "model is a scalar",
    "model: tiny\n" + TRAIN + "cluster: {gpu: a100-80gb, num_gpus: 8}\n", "yaml")
raw("yaml_top_level_scalar", "p", "object", "a YAML scalar, not a mapping", "hello\n", "yaml")
raw("yaml_name_257", "p", "name", "a 257-byte name in YAML",
    "name: " + "n" * 257 + "\nmodel: {preset: gpt3-175b}\n" + TRAIN +
    "cluster: {gpu: a100-80gb, num_gpus: 8}\n", "yaml")
raw("yaml_fp8_a100", "p", "cluster.gpu a100-80gb", "fp8 on A100 in YAML",
    "model: {preset: gpt3-175b}\ntraining: {seq_length: 2048, global_batch_size: 64, "
    "precision: fp8}\ncluster: {gpu: a100-80gb, num_gpus: 8}\n", "yaml")
raw("yaml_tp_65_entries", "p", "search.tp", "65 entries in YAML",
    "model: {preset: gpt3-175b}\n" + TRAIN + "cluster: {gpu: a100-80gb, num_gpus: 8}\n"
    "search: {tp: [" + ", ".join(str(i) for i in range(1, 66)) + "]}\n", "yaml")

os.makedirs(os.path.join(HERE, "cases"), exist_ok=True)
for f in os.listdir(os.path.join(HERE, "cases")):
    os.remove(os.path.join(HERE, "cases", f))
rows = ["# file\ttransports\texpect\trule"]
for name, transports, expect, rule, content, ext in cases:
    path = f"cases/{name}.{ext}"
    if isinstance(content, dict):
        spec = copy.deepcopy(BASE)
        for p, v in content.items():
            setp(spec, p, v)
        text = json.dumps(spec, indent=1) + "\n"
    else:
        text = content
    # surrogateescape: "\udcXX" in a raw case is the single byte XX (text that is not UTF-8).
    with open(os.path.join(HERE, path), "w", encoding="utf-8", errors="surrogateescape") as out:
        out.write(text)
    rows.append(f"{path}\t{transports}\t{expect}\t{rule}")
with open(os.path.join(HERE, "manifest.tsv"), "w") as out:
    out.write("\n".join(rows) + "\n")
with open(os.path.join(HERE, "base.json"), "w") as out:
    out.write(json.dumps(BASE, indent=1) + "\n")
print(f"{len(cases)} cases")
