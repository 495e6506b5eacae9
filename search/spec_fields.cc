// The shared strict field readers (see spec_fields.h).
#include "search/spec_fields.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "search/hf_import.h"

namespace paratune {
namespace {

using nlohmann::json;

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string SpecFieldPath(const std::string& section, const std::string& key) {
  return section.empty() ? key : absl::StrCat(section, ".", key);
}

absl::Status CheckSpecKeys(const json& obj, const std::string& section,
                           const std::vector<std::string>& allowed) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string best;
    size_t best_distance = 3;  // Suggest only close matches (at most 2 edits).
    for (const std::string& candidate : allowed) {
      const size_t d = EditDistance(key, candidate);
      if (d < best_distance) {
        best_distance = d;
        best = candidate;
      }
    }
    std::string message = absl::StrCat("unknown field '", SpecFieldPath(section, key), "'");
    if (!best.empty())
      absl::StrAppend(&message, " (did you mean '", SpecFieldPath(section, best), "'?)");
    absl::StrAppend(&message, "; allowed: ", absl::StrJoin(allowed, ", "));
    return absl::InvalidArgumentError(message);
  }
  return absl::OkStatus();
}

const json* FindSpecField(const json& obj, const std::string& key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<int64_t> SpecInt(const json& v, const std::string& path) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " (", v.dump(), ") is out of the 64-bit integer range"));
    }
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::trunc(d) != d) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " must be an integer, got ", JsonPreview(v)));
    }
    // 2^63 itself is not representable as int64.
    if (std::fabs(d) >= 9223372036854775808.0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " (", JsonPreview(v), ") is out of the 64-bit integer range"));
    }
    return static_cast<int64_t>(d);
  }
  if (v.is_string()) {
    // The proto JSON mapping writes int64 as a decimal string.
    int64_t parsed = 0;
    const std::string s = v.get<std::string>();
    if (!s.empty() && absl::SimpleAtoi(s, &parsed) &&
        std::all_of(s.begin() + (s[0] == '-' ? 1 : 0), s.end(),
                    [](char c) { return absl::ascii_isdigit(c); })) {
      return parsed;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, " must be an integer, got ", JsonPreview(v)));
}

absl::StatusOr<bool> SpecBool(const json& v, const std::string& path) {
  if (v.is_boolean()) return v.get<bool>();
  return absl::InvalidArgumentError(
      absl::StrCat(path, " must be true or false, got ", JsonPreview(v)));
}

absl::StatusOr<double> SpecDouble(const json& v, const std::string& path) {
  if (v.is_number()) return v.get<double>();
  return absl::InvalidArgumentError(absl::StrCat(path, " must be a number, got ", JsonPreview(v)));
}

absl::StatusOr<std::string> SpecString(const json& v, const std::string& path) {
  if (v.is_string()) return v.get<std::string>();
  return absl::InvalidArgumentError(absl::StrCat(path, " must be a string, got ", JsonPreview(v)));
}

}  // namespace paratune
