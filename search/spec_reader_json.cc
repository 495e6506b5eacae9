#include "search/spec_reader_json.h"

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace paratune {
namespace {

using json = nlohmann::json;

// One open array or object while parsing: an object's keys so far and the key of the
// value being parsed; an array has no keys.
struct Level {
  bool is_object = false;
  std::set<std::string> keys;
  std::string current_key;
};

std::string PathOf(const std::vector<Level>& levels, const std::string& last_key) {
  std::string path;
  for (size_t i = 0; i < levels.size(); ++i) {
    const Level& level = levels[i];
    const bool innermost = i + 1 == levels.size();
    if (!level.is_object) {
      absl::StrAppend(&path, "[]");
      continue;
    }
    const std::string& key = innermost ? last_key : level.current_key;
    absl::StrAppend(&path, path.empty() ? "" : ".", key);
  }
  return path;
}

absl::Status TooDeep(const std::string& path) {
  return absl::InvalidArgumentError(absl::StrCat(path.empty() ? "" : path + ": ",
                                                 "JSON nested deeper than ", kMaxJsonNesting,
                                                 " levels"));
}

}  // namespace

absl::StatusOr<json> ParseJsonStrict(std::string_view text) {
  std::vector<Level> levels;
  std::string duplicate;  // path of the first key given twice
  bool too_deep = false;
  std::string deep_path;  // where the nesting bound was passed
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonNesting && !too_deep) {
          too_deep = true;
          // The outermost key is enough to name the field (the full path is 64 levels long).
          if (levels.size() > 1 && levels[0].is_object) deep_path = levels[0].current_key;
          if (levels.size() > 2 && levels[0].is_object && levels[1].is_object &&
              !levels[1].current_key.empty()) {
            deep_path = absl::StrCat(deep_path, ".", levels[1].current_key);
          }
        }
        levels.push_back(Level{event == json::parse_event_t::object_start, {}, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!levels.empty()) levels.pop_back();
        break;
      case json::parse_event_t::key:
        if (!levels.empty() && levels.back().is_object) {
          const std::string key = parsed.get<std::string>();
          if (!levels.back().keys.insert(key).second && duplicate.empty()) {
            duplicate = PathOf(levels, key);
          }
          levels.back().current_key = key;
        }
        break;
      case json::parse_event_t::value:
        break;
    }
    // Stop building a document that will be refused anyway (false discards the value;
    // the parse itself goes on to find syntax errors, within the nesting bound).
    return !too_deep;
  };
  json parsed;
  try {
    parsed = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {  // parse_error; out_of_range for 1e999
    if (too_deep) return TooDeep(deep_path);
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 5: ...".
    std::string what = e.what();
    if (const size_t end = what.find("] ");
        what.rfind("[json.exception", 0) == 0 && end != std::string::npos) {
      what.erase(0, end + 2);
    }
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", what));
  }
  if (too_deep) return TooDeep(deep_path);
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the key '", duplicate, "' appears twice (each key may appear once)"));
  }
  return parsed;
}

}  // namespace paratune
