// The strict field readers that every job kind's spec reader shares (search/spec_io.h for
// training, inference/spec_io.h for serving): typed values whose errors name the field's
// path, unknown keys with a suggestion, and scalars, enums and lists read from a section.
// null means "not given" throughout.
#ifndef PARATUNE_SEARCH_SPEC_FIELDS_H_
#define PARATUNE_SEARCH_SPEC_FIELDS_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace paratune {

/// InvalidArgument `unknown field 'section.key' (did you mean ...)` for a key of `obj`
/// not in `allowed`.
absl::Status CheckSpecKeys(const nlohmann::json& obj, const std::string& section,
                           const std::vector<std::string>& allowed);
/// A field's value; `path` names it in errors. Integers may be JSON numbers with an
/// integral value or decimal strings (the proto JSON form of int64).
absl::StatusOr<int64_t> SpecInt(const nlohmann::json& v, const std::string& path);
absl::StatusOr<double> SpecDouble(const nlohmann::json& v, const std::string& path);
absl::StatusOr<bool> SpecBool(const nlohmann::json& v, const std::string& path);
absl::StatusOr<std::string> SpecString(const nlohmann::json& v, const std::string& path);

/// `name` parsed with `parse` (a `ParseX(name)` that returns StatusOr<X>); its error is
/// prefixed with `path`.
template <typename Parse>
auto ParseSpecName(const std::string& name, const std::string& path, Parse parse)
    -> decltype(parse(std::string())) {
  auto r = parse(name);
  if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", r.status().message()));
  return *r;
}

/// A field's value as an enum given by name (ParseSpecName).
template <typename Parse>
auto SpecEnum(const nlohmann::json& v, const std::string& path, Parse parse)
    -> decltype(parse(std::string())) {
  auto s = SpecString(v, path);
  if (!s.ok()) return s.status();
  return ParseSpecName(*s, path, parse);
}

/// The value at `key`, or nullptr when it is absent or null ("not given").
const nlohmann::json* FindSpecField(const nlohmann::json& obj, const std::string& key);
/// `section.key`, or `key` at the top level (empty section).
std::string SpecFieldPath(const std::string& section, const std::string& key);

/// Reads `section.key` into `*out` with `as` (SpecInt, SpecBool, ...) when present;
/// `*given` records whether it was.
template <typename T>
absl::Status ReadSpecField(const nlohmann::json& obj, const std::string& section,
                           const std::string& key,
                           absl::StatusOr<T> (*as)(const nlohmann::json&, const std::string&),
                           T* out, bool* given = nullptr) {
  const nlohmann::json* v = FindSpecField(obj, key);
  if (given != nullptr) *given = v != nullptr;
  if (v == nullptr) return absl::OkStatus();
  auto r = as(*v, SpecFieldPath(section, key));
  if (!r.ok()) return r.status();
  *out = *r;
  return absl::OkStatus();
}

/// Reads an enum given by name with `parse`; an empty string means the default.
template <typename E, typename Parse>
absl::Status ReadSpecEnum(const nlohmann::json& obj, const std::string& section,
                          const std::string& key, Parse parse, E* out) {
  const nlohmann::json* v = FindSpecField(obj, key);
  if (v == nullptr) return absl::OkStatus();
  const std::string path = SpecFieldPath(section, key);
  auto s = SpecString(*v, path);
  if (!s.ok()) return s.status();
  if (s->empty()) return absl::OkStatus();
  auto r = ParseSpecName(*s, path, parse);
  if (!r.ok()) return r.status();
  *out = *r;
  return absl::OkStatus();
}

/// Reads a list, or a scalar as a one-element list, converting each element with `convert`.
template <typename T, typename Convert>
absl::Status ReadSpecList(const nlohmann::json& obj, const std::string& section,
                          const std::string& key, Convert convert, std::vector<T>* out) {
  const nlohmann::json* v = FindSpecField(obj, key);
  if (v == nullptr) return absl::OkStatus();
  const std::string path = SpecFieldPath(section, key);
  out->clear();
  if (!v->is_array()) {
    auto r = convert(*v, path);
    if (!r.ok()) return r.status();
    out->push_back(*r);
    return absl::OkStatus();
  }
  for (size_t i = 0; i < v->size(); ++i) {
    auto r = convert((*v)[i], absl::StrCat(path, "[", i, "]"));
    if (!r.ok()) return r.status();
    out->push_back(*r);
  }
  return absl::OkStatus();
}

}  // namespace paratune

#endif  // PARATUNE_SEARCH_SPEC_FIELDS_H_
