// Spec files: YAML typing, duplicate keys, hf_config path resolution, and every example
// spec under deploy/examples parses and validates.
#include "client/spec_file.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
    auto spec = JobSpecFromJson(*j);
    EXPECT_TRUE(spec.ok()) << entry.path() << ": " << spec.status();
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

}  // namespace
}  // namespace paratune::client
