// Spec file reading (see spec_file.h).
#include "client/spec_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "search/spec_reader_json.h"
#include "search/specs.h"

namespace paratune::client {
namespace {

using nlohmann::json;

bool IsDigits(absl::string_view s, bool (*digit)(char)) {
  return !s.empty() && std::all_of(s.begin(), s.end(), digit);
}
bool Decimal(char c) { return c >= '0' && c <= '9'; }
bool Octal(char c) { return c >= '0' && c <= '7'; }
bool Hex(char c) { return absl::ascii_isxdigit(static_cast<unsigned char>(c)); }
absl::string_view WithoutSign(absl::string_view s) {
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  return s;
}
bool OneOf(absl::string_view s, std::initializer_list<absl::string_view> names) {
  return std::find(names.begin(), names.end(), s) != names.end();
}

/// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsCoreFloat(absl::string_view s) {
  s = WithoutSign(s);
  size_t i = 0;
  while (i < s.size() && Decimal(s[i])) ++i;
  const size_t whole = i;
  size_t fraction = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && Decimal(s[i])) ++i, ++fraction;
  }
  if (whole == 0 && fraction == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    return IsDigits(WithoutSign(s.substr(i + 1)), Decimal);
  }
  return i == s.size();
}

/// A plain (unquoted) scalar typed by the YAML 1.2 core schema (matched by hand: a spec's
/// scalars are typed in linear time, whatever their length).
json PlainScalar(const std::string& s) {
  if (OneOf(s, {"null", "Null", "NULL", "~", ""})) return nullptr;
  if (OneOf(s, {"true", "True", "TRUE"})) return true;
  if (OneOf(s, {"false", "False", "FALSE"})) return false;
  if (IsDigits(WithoutSign(s), Decimal)) {
    int64_t i = 0;
    if (absl::SimpleAtoi(s, &i)) return i;
    uint64_t u = 0;
    if (absl::SimpleAtoi(s, &u)) return u;
    // Beyond 64 bits: keep the magnitude so that validation can say it is out of range.
    return std::strtod(s.c_str(), nullptr);
  }
  const absl::string_view digits = absl::string_view(s).substr(std::min<size_t>(2, s.size()));
  if (absl::StartsWith(s, "0x") && IsDigits(digits, Hex)) {
    uint64_t u = 0;
    if (absl::SimpleHexAtoi(digits, &u)) return u;
    return s;
  }
  if (absl::StartsWith(s, "0o") && IsDigits(digits, Octal)) {
    errno = 0;
    const unsigned long long v = std::strtoull(s.c_str() + 2, nullptr, 8);
    if (errno == 0) return static_cast<uint64_t>(v);
    return s;
  }
  if (IsCoreFloat(s)) return std::strtod(s.c_str(), nullptr);
  if (OneOf(WithoutSign(s), {".inf", ".Inf", ".INF"})) {
    return s[0] == '-' ? -std::numeric_limits<double>::infinity()
                       : std::numeric_limits<double>::infinity();
  }
  if (OneOf(s, {".nan", ".NaN", ".NAN"})) return std::numeric_limits<double>::quiet_NaN();
  return s;
}

std::string Where(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return "";
  return absl::StrCat(" (line ", mark.line + 1, ", column ", mark.column + 1, ")");
}

absl::StatusOr<json> Convert(const YAML::Node& node, const std::string& path, size_t* budget,
                             int depth) {
  if (depth > kMaxJsonNesting) {
    // The JSON form's limit; an alias used inside its own anchor nests without end.
    return absl::InvalidArgumentError(
        absl::StrCat("the document nests deeper than ", kMaxJsonNesting, " levels at '",
                     path.empty() ? "(top level)" : path.substr(0, 200), "'", Where(node),
                     " (a YAML alias inside its own anchor?)"));
  }
  if (*budget == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the document expands to more than ", kMaxSpecValues, " values at '",
        path.empty() ? "(top level)" : path, "'", Where(node),
        " (YAML aliases that repeat anchors within anchors?)"));
  }
  --*budget;
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return json(nullptr);
    case YAML::NodeType::Scalar:
      // "!" marks a quoted (non-plain) scalar, which is always a string.
      if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") {
        return json(node.Scalar());
      }
      return PlainScalar(node.Scalar());
    case YAML::NodeType::Sequence: {
      json array = json::array();
      size_t i = 0;
      for (const YAML::Node& item : node) {
        auto v = Convert(item, absl::StrCat(path, "[", i++, "]"), budget, depth + 1);
        if (!v.ok()) return v.status();
        array.push_back(std::move(*v));
      }
      return array;
    }
    case YAML::NodeType::Map: {
      json object = json::object();
      for (const auto& entry : node) {
        if (!entry.first.IsScalar()) {
          return absl::InvalidArgumentError(
              absl::StrCat("a key under '", path.empty() ? "(top level)" : path,
                           "' is not a plain name", Where(entry.first)));
        }
        const std::string key = entry.first.Scalar();
        const std::string child = path.empty() ? key : absl::StrCat(path, ".", key);
        if (object.contains(key)) {
          return absl::InvalidArgumentError(
              absl::StrCat("duplicate key '", child, "'", Where(entry.first)));
        }
        auto v = Convert(entry.second, child, budget, depth + 1);
        if (!v.ok()) return v.status();
        object[key] = std::move(*v);
      }
      return object;
    }
  }
  return json(nullptr);
}

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a fifo";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

absl::StatusOr<std::string> ReadInputFile(const std::string& path, size_t max_bytes,
                                          const std::string& what) {
  // O_NONBLOCK: opening a fifo for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string message =
        absl::StrCat(what, ": cannot read '", path, "': ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(message) : absl::InvalidArgumentError(message);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t mode = st.st_mode;
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", path, "' is ", FileKind(mode),
                                                   "; only regular files are read"));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", path, "' is ", st.st_size,
                                                   " bytes; the limit is ", max_bytes,
                                                   " bytes"));
  }
  // Read at most one byte past the limit: a file that grows after fstat stays bounded.
  std::string text;
  text.resize(max_bytes + 1);
  size_t n = 0;
  while (n < text.size()) {
    const ssize_t got = ::read(fd, text.data() + n, text.size() - n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": cannot read '", path, "': ", std::strerror(err)));
    }
    if (got == 0) break;
    n += static_cast<size_t>(got);
  }
  ::close(fd);
  if (n > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", path, "' is over the limit of ",
                                                   max_bytes, " bytes"));
  }
  text.resize(n);
  return text;
}

absl::StatusOr<json> YamlToJson(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("line ", e.mark.line + 1, ", column ",
                                                   e.mark.column + 1, ": ", e.msg));
  }
  try {
    size_t budget = kMaxSpecValues;
    return Convert(root, "", &budget, 0);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("line ", e.mark.line + 1, ", column ",
                                                   e.mark.column + 1, ": ", e.msg));
  }
}

absl::StatusOr<json> ReadSpecFile(const std::string& path) {
  auto text = ReadInputFile(path, kMaxSpecFileBytes, "spec file");
  if (!text.ok()) return text.status();
  absl::StatusOr<json> spec;
  if (absl::EndsWithIgnoreCase(path, ".json")) {
    // nlohmann keeps the last of duplicate keys silently; a spec must not have any.
    std::vector<std::set<std::string>> keys;
    std::string duplicate;
    auto callback = [&keys, &duplicate](int /*depth*/, json::parse_event_t event,
                                        json& parsed) {
      if (event == json::parse_event_t::object_start) {
        keys.emplace_back();
      } else if (event == json::parse_event_t::object_end) {
        keys.pop_back();
      } else if (event == json::parse_event_t::key && !keys.empty() && duplicate.empty() &&
                 !keys.back().insert(parsed.get<std::string>()).second) {
        duplicate = parsed.get<std::string>();
      }
      return true;
    };
    try {
      spec = json::parse(*text, callback);
    } catch (const json::parse_error& e) {
      // The position only: nlohmann's message quotes the text ("last read: '...'"), and
      // the file named may be anything (--spec /etc/shadow).
      const size_t end = std::min<size_t>(e.byte, text->size());
      size_t line = 1, column = 1;
      for (size_t i = 0; i + 1 < end; ++i) {
        column = (*text)[i] == '\n' ? 1 : column + 1;
        line += (*text)[i] == '\n' ? 1 : 0;
      }
      return absl::InvalidArgumentError(absl::StrCat("spec file '", path,
                                                     "' is not valid JSON: syntax error at line ",
                                                     line, ", column ", column));
    } catch (const json::exception&) {  // out_of_range for 1e999
      return absl::InvalidArgumentError(absl::StrCat(
          "spec file '", path, "' is not valid JSON: a number out of range of a double"));
    }
    if (!duplicate.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec file '", path, "' has the key '", duplicate, "' twice"));
    }
  } else {
    spec = YamlToJson(*text);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec file '", path, "' is not valid YAML: ", spec.status().message()));
    }
  }

  // model.hf_config: PATH → model.hf_config_json: CONTENTS.
  if (spec->is_object() && spec->contains("model") && (*spec)["model"].is_object()) {
    json& model = (*spec)["model"];
    auto it = model.find("hf_config");
    if (it != model.end() && it->is_string()) {
      std::filesystem::path hf = it->get<std::string>();
      if (hf.is_relative()) hf = std::filesystem::path(path).parent_path() / hf;
      std::error_code ec;
      if (std::filesystem::is_directory(hf, ec)) hf /= "config.json";
      auto contents = ReadInputFile(hf.string(), kMaxHfConfigJsonBytes, "model.hf_config");
      if (!contents.ok()) return absl::InvalidArgumentError(contents.status().message());
      if (model.contains("hf_config_json")) {
        return absl::InvalidArgumentError(
            "model.hf_config and model.hf_config_json are mutually exclusive");
      }
      model.erase("hf_config");
      model["hf_config_json"] = *contents;
    }
  }
  return spec;
}

}  // namespace paratune::client
