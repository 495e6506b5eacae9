// Spec files: YAML typing, duplicate keys, hf_config path resolution, and every example
// spec under deploy/examples parses and validates.
#include "client/spec_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include <cmath>
#include <limits>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "inference/spec_io.h"
#include "search/spec_io.h"

namespace paratune::client {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

std::string SourceDir() {
  const char* root = std::getenv("PARATUNE_SOURCE_DIR");
  return root != nullptr ? root : PARATUNE_DEFAULT_SOURCE_DIR;
}

TEST(SpecFileTest, YamlScalarsAreTypedByTheCoreSchema) {
  auto j = YamlToJson(R"(
ints: [12, -3, +4, 0x10, 0o17]
floats: [2.5, 1e12, -1.5e-3, .inf]
bools: [true, False, TRUE]
nulls: [null, ~, ]
strings: [abc, "12", '1e12', yes, 8GB]
empty:
)");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["ints"], json({12, -3, 4, 16, 15}));
  EXPECT_TRUE((*j)["ints"][0].is_number_integer());
  EXPECT_DOUBLE_EQ((*j)["floats"][0].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ((*j)["floats"][1].get<double>(), 1e12);
  EXPECT_TRUE((*j)["floats"][1].is_number_float());
  EXPECT_DOUBLE_EQ((*j)["floats"][2].get<double>(), -1.5e-3);
  EXPECT_TRUE(std::isinf((*j)["floats"][3].get<double>()));
  EXPECT_EQ((*j)["bools"], json({true, false, true}));
  EXPECT_TRUE((*j)["nulls"][0].is_null());
  EXPECT_TRUE((*j)["nulls"][1].is_null());
  // Quoted scalars stay strings; YAML 1.1's `yes` is a string in the 1.2 core schema.
  EXPECT_EQ((*j)["strings"], json({"abc", "12", "1e12", "yes", "8GB"}));
  EXPECT_TRUE((*j)["empty"].is_null());
}

TEST(SpecFileTest, CoreSchemaEdgesOfNumbers) {
  auto j = YamlToJson(R"(
floats: [5., .5, +1.5E+3, -.inf, +.Inf]
nan: .NaN
strings: [0x, 0xZZ, 0o8, 1e, +-1, ., e5, 1.2.3, .infinity, 1_000]
)");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["floats"][0], json(5.0));
  EXPECT_EQ((*j)["floats"][1], json(0.5));
  EXPECT_EQ((*j)["floats"][2], json(1500.0));
  EXPECT_EQ((*j)["floats"][3], json(-std::numeric_limits<double>::infinity()));
  EXPECT_EQ((*j)["floats"][4], json(std::numeric_limits<double>::infinity()));
  EXPECT_TRUE(std::isnan((*j)["nan"].get<double>()));
  EXPECT_EQ((*j)["strings"], json({"0x", "0xZZ", "0o8", "1e", "+-1", ".", "e5", "1.2.3",
                                   ".infinity", "1_000"}));
}

TEST(SpecFileTest, HugeIntegersKeepTheirMagnitude) {
  auto j = YamlToJson("a: 18446744073709551615\nb: 99999999999999999999999\n");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_TRUE((*j)["a"].is_number_unsigned());
  EXPECT_DOUBLE_EQ((*j)["b"].get<double>(), 1e23);
}

TEST(SpecFileTest, MalformedYamlReportsLineAndColumn) {
  auto j = YamlToJson("model: {num_layers: 24,\ntraining:\n  seq: [1, 2\n");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(j.status().message(), HasSubstr("line "));
  auto dup = YamlToJson("model:\n  num_layers: 2\n  num_layers: 3\n");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().message(), "duplicate key 'model.num_layers' (line 3, column 3)");
}

TEST(SpecFileTest, DuplicateJsonKeysAreRejected) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                          ("dup_json_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "d.json") << R"({"model": {"num_layers": 2, "hidden_size": 64,
      "num_layers": 3}, "training": {}})";
  auto j = ReadSpecFile((dir / "d.json").string());
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.status().message(), HasSubstr("has the key 'num_layers' twice"));
  // The same key in two different objects is fine.
  std::ofstream(dir / "ok.json") << R"({"a": {"x": 1}, "b": {"x": 2}, "x": [{"x": 3}]})";
  EXPECT_TRUE(ReadSpecFile((dir / "ok.json").string()).ok());
  std::filesystem::remove_all(dir);
}

TEST(SpecFileTest, MissingFileIsNotFound) {
  auto j = ReadSpecFile("/nonexistent/spec.yaml");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(j.status().message(), HasSubstr("cannot read '/nonexistent/spec.yaml'"));
}

TEST(SpecFileTest, HfConfigIsResolvedRelativeToTheSpecFile) {
  auto j = ReadSpecFile(SourceDir() + "/tests/data/specs/hf_llama.yaml");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_FALSE((*j)["model"].contains("hf_config"));
  ASSERT_TRUE((*j)["model"]["hf_config_json"].is_string());
  auto spec = JobSpecFromJson(*j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.num_layers, 16);  // the spec's override
  EXPECT_EQ(spec->model.num_query_groups, 8);
  EXPECT_EQ(spec->model.vocab_size, 128256);

  // A folder holding config.json works too.
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                          ("hf_dir_spec_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "model");
  std::filesystem::copy_file(SourceDir() + "/tests/data/hf/gpt2.json", dir / "model/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "spec.yaml") << "model: {hf_config: model}\n"
                                      "training: {seq_length: 1024, global_batch_size: 8}\n"
                                      "cluster: {gpu: a100-40gb, num_gpus: 1}\n";
  j = ReadSpecFile((dir / "spec.yaml").string());
  ASSERT_TRUE(j.ok()) << j.status();
  spec = JobSpecFromJson(*j);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.hidden_size, 768);

  std::ofstream(dir / "missing.yaml") << "model: {hf_config: nothere.json}\n";
  j = ReadSpecFile((dir / "missing.yaml").string());
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.status().message(), HasSubstr("model.hf_config: cannot read"));
  EXPECT_THAT(j.status().message(), HasSubstr("nothere.json"));
  std::filesystem::remove_all(dir);
}

TEST(SpecFileTest, EveryExampleSpecIsValid) {
  int count = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(SourceDir() + "/deploy/examples")) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".yaml" && ext != ".yml" && ext != ".json") continue;
    auto j = ReadSpecFile(entry.path().string());
    ASSERT_TRUE(j.ok()) << entry.path() << ": " << j.status();
    auto kind = inference::JobKindOf(*j);
    ASSERT_TRUE(kind.ok()) << entry.path() << ": " << kind.status();
    // `kind: inference` specs are read by the inference reader, as `paratune` does.
    const absl::Status status = *kind == inference::JobKind::kInference
                                    ? inference::InferenceJobSpecFromJson(*j).status()
                                    : JobSpecFromJson(*j).status();
    EXPECT_TRUE(status.ok()) << entry.path() << ": " << status;
    ++count;
  }
  EXPECT_GE(count, 4);
}

TEST(SpecFileTest, YamlAndJsonFormsAgree) {
  // The same spec in both syntaxes gives the same JobSpec.
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                          ("both_forms_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "s.yaml") << "model: {preset: llama3-8b}\n"
                                   "training: {seq_length: 8192, global_batch_size: 128}\n"
                                   "cluster: {gpu: h100-sxm-80gb, num_gpus: 8}\n"
                                   "search: {tp: [1, 2], recompute: selective}\n";
  std::ofstream(dir / "s.json") << R"({"model": {"preset": "llama3-8b"},
    "training": {"seq_length": 8192, "global_batch_size": 128},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
    "search": {"tp": [1, 2], "recompute": "selective"}})";
  auto yaml = ReadSpecFile((dir / "s.yaml").string());
  auto json_form = ReadSpecFile((dir / "s.json").string());
  ASSERT_TRUE(yaml.ok() && json_form.ok());
  EXPECT_EQ(*yaml, *json_form);
  auto a = JobSpecFromJson(*yaml);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(JobSpecToJson(*a), JobSpecToJson(*JobSpecFromJson(*json_form)));
  std::filesystem::remove_all(dir);
}

TEST(SpecFileTest, ReadInputFileReadsOnlySmallRegularFiles) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ("input_file_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "ten") << "0123456789";
  absl::StatusOr<std::string> text = ReadInputFile((dir / "ten").string(), 10, "x");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "0123456789");
  text = ReadInputFile((dir / "ten").string(), 9, "model.hf_config");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message(), "model.hf_config: '" + (dir / "ten").string() +
                                         "' is 10 bytes; the limit is 9 bytes");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  for (const auto& [path, kind] : std::vector<std::pair<std::string, std::string>>{
           {"/dev/zero", "a character device"},
           {"/dev/urandom", "a character device"},
           {(dir / "fifo").string(), "a fifo"},
           {dir.string(), "a directory"}}) {
    text = ReadInputFile(path, 1 << 20, "spec file");
    EXPECT_EQ(text.status().message(),
              "spec file: '" + path + "' is " + kind + "; only regular files are read");
  }
  // No wait for a writer on the fifo.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  text = ReadInputFile((dir / "missing").string(), 10, "spec file");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(SpecFileTest, NestedAliasesAreRefusedWithinTheValueBudget) {
  // 10 x 10 x ... : 10^9 values when expanded, 10 lines of text.
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    const std::string prev(1, static_cast<char>(c - 1));
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int k = 0; k < 10; ++k) bomb += (k > 0 ? ", *" : "*") + prev;
    bomb += "]\n";
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<json> j = YamlToJson(bomb);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_FALSE(j.ok());
  // Values before e: the root, then a..d with 11, 111, 1,111 and 11,111 = 12,345. In e
  // (1 + 10 x 11,111) the remaining 87,655 end at e[7][8][8][8][9]: 1 + 7 x 11,111, then
  // 1 + 8 x 1,111, 1 + 8 x 111, 1 + 8 x 11 and 1 + 9 x 1.
  EXPECT_THAT(j.status().message(),
              HasSubstr("the document expands to more than 100000 values at 'e[7][8][8][8][9]'"));
  // Aliases that stay within the budget are expanded as before.
  j = YamlToJson("a: &a [1, 2]\nb: [*a, *a]\n");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["b"], json({{1, 2}, {1, 2}}));
}

TEST(SpecFileTest, AnAliasInsideItsOwnAnchorIsRefusedByDepth) {
  // `e` holds itself: an endless nesting, refused at the JSON form's depth limit.
  absl::StatusOr<json> j = YamlToJson("a: [x, x]\ne: &e [*e, 1]\n");
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.status().message(),
              HasSubstr("the document nests deeper than 64 levels at 'e[0][0][0]"));
  EXPECT_THAT(j.status().message(), HasSubstr("a YAML alias inside its own anchor?"));
  // 64 levels (the top-level mapping and 63 lists) are accepted; 65 are not.
  auto nested = [](int levels) {
    std::string s = "x: ";
    for (int i = 0; i < levels; ++i) s += "[";
    s += "1";
    for (int i = 0; i < levels; ++i) s += "]";
    return s + "\n";
  };
  EXPECT_TRUE(YamlToJson(nested(63)).ok()) << YamlToJson(nested(63)).status();
  absl::StatusOr<json> deep = YamlToJson(nested(64));
  ASSERT_FALSE(deep.ok());
  EXPECT_THAT(deep.status().message(), HasSubstr("nests deeper than 64 levels"));
}

TEST(SpecFileTest, JsonErrorsGiveAPositionNotTheText) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ("json_error_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "s.json") << "{\n  \"model\": secret-value\n}";
  absl::StatusOr<json> j = ReadSpecFile((dir / "s.json").string());
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message(), "spec file '" + (dir / "s.json").string() +
                                      "' is not valid JSON: syntax error at line 2, column 12");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace paratune::client
