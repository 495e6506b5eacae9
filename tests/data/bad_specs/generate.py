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
mut("num_experts_moe", "rgp", "model.num_experts", "dense models only",
    **{"model.num_experts": 8})
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
mut("flash_attention_string", "p", "flash_attention", "wrong type (string for bool)",
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
mut("unknown_search_field", "rp", "ep", "unknown field", **{"search.ep": [1]})
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
    with open(os.path.join(HERE, path), "w", encoding="utf-8") as out:
        out.write(text)
    rows.append(f"{path}\t{transports}\t{expect}\t{rule}")
with open(os.path.join(HERE, "manifest.tsv"), "w") as out:
    out.write("\n".join(rows) + "\n")
with open(os.path.join(HERE, "base.json"), "w") as out:
    out.write(json.dumps(BASE, indent=1) + "\n")
print(f"{len(cases)} cases")
