// The job spec's JSON form: the strict reader (JobSpecFromJson) and the canonical writer
// (JobSpecToJson), plus the one layout a fully pinned spec names. Field names are those of
// proto/paratune/v1/spec.proto in the snake_case JSON mapping, so that the CLI's spec files
// and the REST body are one format. Results are printed by the client (client/render.h)
// from their wire form (server/convert.h).
#ifndef PARATUNE_SEARCH_SPEC_IO_H_
#define PARATUNE_SEARCH_SPEC_IO_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "search/parallel_config.h"
#include "search/specs.h"

namespace paratune {

/// Builds a JobSpec from its JSON form (`{name, model, training, cluster, search}`) and
/// validates it (JobSpec::Validate). Strict: an unknown field is an error naming its path
/// (`unknown field 'model.hiden_size' (did you mean 'model.hidden_size'?)`), and so is a
/// wrong type. Integers may be JSON numbers with an integral value or decimal strings (the
/// proto JSON form of int64); null means "not given". A scalar where a search list is
/// expected is a one-element list. Zero is the default for the fields whose proto comment
/// says so (num_query_groups = heads, ffn_hidden_size = 4h, gpus_per_node = 8, top_k = 10).
/// The model is `model.preset` (search/presets.h) or `model.hf_config_json` (the text of
/// a Hugging Face config.json; `model.hf_config` may hold the parsed object) or explicit
/// fields; explicit fields given beside a preset or config override it. With learned
/// positions, model.max_position_embeddings comes back resolved to the table's rows: 0 (the
/// default) is seq_length, as in Megatron-LM, and a preset's or config's smaller table grows
/// to seq_length; a value the spec gives itself must be 0 or at least seq_length.
absl::StatusOr<JobSpec> JobSpecFromJson(const nlohmann::json& j);

/// The canonical JSON of a spec: explicit model fields (no preset), every default written
/// out; JobSpecFromJson reads it back to the same spec (a spec it returned itself; one built
/// in code with learned positions and max_position_embeddings below seq_length comes back
/// resolved).
nlohmann::json JobSpecToJson(const JobSpec& spec);

/// The one layout a fully pinned spec names, for `paratune estimate` and `export`. Every
/// search dimension needs exactly one value, except those with only one meaningful value:
/// dp (= num_gpus / (tp*pp*cp)), vp when pp is 1, sequence_parallel when tp is 1,
/// data_parallel_sharding when dp*cp is 1, recompute_num_layers unless recompute is full;
/// shard_group_size is copied as given.
/// InvalidArgument naming the first unpinned dimension.
absl::StatusOr<ParallelConfig> PinnedLayout(const JobSpec& spec);

// The sections on their own, for the other job kinds' specs (inference/spec_io.h), so that
// every kind reads models and clusters the same way (and their fields with
// search/spec_fields.h).

/// The `model` section (preset, hf_config, explicit fields) as JobSpecFromJson reads it,
/// not validated.
absl::StatusOr<ModelSpec> ModelSpecFromJson(const nlohmann::json& j);
/// The `cluster` section, not validated.
absl::StatusOr<ClusterSpec> ClusterSpecFromJson(const nlohmann::json& j);
/// The canonical `model` and `cluster` sections (as JobSpecToJson writes them).
nlohmann::json ModelSpecToJson(const ModelSpec& m);
nlohmann::json ClusterSpecToJson(const ClusterSpec& c);

}  // namespace paratune

#endif  // PARATUNE_SEARCH_SPEC_IO_H_
