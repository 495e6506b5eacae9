// What the CLI and the worker read from a user is bounded: spec and Hugging Face config
// files (size, regular files only, YAML aliases, no echo of a file's bytes), the --top and
// --devices flags, and a precision the device lacks. Each runs the real binaries.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <string>

#include "tests/e2e/fault_harness.h"

namespace paratune::e2e {
namespace {

// The valid base of tests/data/bad_specs/base.json, as YAML; `model_extra` goes under model.
std::string Spec(const std::string& model_extra = "", const std::string& precision = "fp32",
                 const std::string& gpu = "a100-80gb") {
  return "name: bounds\n"
         "model:\n"
         "  name: tiny\n"
         "  num_layers: 4\n"
         "  hidden_size: 64\n"
         "  num_attention_heads: 4\n"
         "  vocab_size: 256\n" +
         model_extra + "training: {seq_length: 64, global_batch_size: 8, precision: " + precision +
         "}\n"
         "cluster: {gpu: " +
         gpu +
         ", num_gpus: 8, gpus_per_node: 8}\n"
         "search: {mode: model, top_k: 4}\n";
}

class InputBoundsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = BinDir();
    ASSERT_FALSE(bin_.empty()) << "PARATUNE_BIN_DIR is not set (run through ctest)";
    dir_ = TestDir("paratune_bounds_",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  struct Run {
    int exit_code;
    std::string err;
    double seconds;
  };
  /// `paratune ARGS` under a 2 GiB address-space limit and a 60 s timeout.
  Run Paratune(const std::string& args, const std::string& binary = "paratune") {
    const fs::path err = dir_ / "err.log";
    fs::remove(err);
    const auto start = std::chrono::steady_clock::now();
    const Output o = RunCommand(
        "ulimit -v 2097152; exec timeout 60 " + (bin_ / binary).string() + " " + args, err);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return {o.exit_code, ReadFile(err), s};
  }
  fs::path Write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

  fs::path bin_, dir_;
};

TEST_F(InputBoundsTest, TheBaseSpecPlans) {
  const Run r = Paratune("plan --spec " + Write("base.yaml", Spec()).string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(InputBoundsTest, HfConfigMustBeASmallRegularFile) {
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  const struct {
    std::string path, kind;
  } cases[] = {{"/dev/zero", "a character device"},
               {"/dev/urandom", "a character device"},
               {(dir_ / "fifo").string(), "a fifo"}};
  for (const auto& c : cases) {
    const fs::path spec = Write(
        "hf.yaml", "model: {hf_config: " + c.path + "}\n" + Spec().substr(Spec().find("training")));
    const Run r = Paratune("plan --spec " + spec.string());
    EXPECT_EQ(r.exit_code, 2) << c.path << ": " << r.err;
    EXPECT_NE(r.err.find("model.hf_config: '" + c.path + "' is " + c.kind +
                         "; only regular files are read"),
              std::string::npos)
        << r.err;
    EXPECT_LT(r.seconds, 20) << c.path;
  }
  // Over the size bound (24 KiB): refused before parsing.
  Write("big.json", "{\"model_type\": \"llama\", \"pad\": \"" + std::string(40000, 'x') + "\"}");
  const fs::path spec =
      Write("big.yaml", "model: {hf_config: big.json}\n" + Spec().substr(Spec().find("training")));
  const Run r = Paratune("plan --spec " + spec.string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("model.hf_config: '" + (dir_ / "big.json").string() + "' is " +
                       std::to_string(fs::file_size(dir_ / "big.json")) +
                       " bytes; the limit is 24576 bytes"),
            std::string::npos)
      << r.err;
}

TEST_F(InputBoundsTest, ErrorsDoNotQuoteAFileThatIsNotASpec) {
  // Shaped like /etc/shadow; the messages must not carry one byte of it.
  const std::string secret = "Sroot:$6$Zq1secret$hash:19000:0:99999:7:::\n";
  Write("shadow", secret);
  const fs::path spec =
      Write("hf.yaml", "model: {hf_config: shadow}\n" + Spec().substr(Spec().find("training")));
  Run r = Paratune("plan --spec " + spec.string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("hf_config is not valid JSON (syntax error at byte 1 of 43)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("'S'"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("secret"), std::string::npos) << r.err;
  // The same file given as a JSON spec: the position, not the bytes.
  Write("shadow.json", secret);
  r = Paratune("plan --spec " + (dir_ / "shadow.json").string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("is not valid JSON: syntax error at line 1, column 1"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("'S'"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("secret"), std::string::npos) << r.err;
}

TEST_F(InputBoundsTest, SpecFilesMustBeSmallRegularFiles) {
  Run r = Paratune("plan --spec /dev/zero");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("spec file: '/dev/zero' is a character device"), std::string::npos) << r.err;
  const fs::path big = Write("big.yaml", Spec() + "# " + std::string(2 << 20, 'x') + "\n");
  r = Paratune("plan --spec " + big.string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("bytes; the limit is 1048576 bytes"), std::string::npos) << r.err;
}

TEST_F(InputBoundsTest, NestedYamlAliasesFailFastWithBoundedMemory) {
  // Ten lines, 10^9 values when expanded.
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    const char prev = static_cast<char>(c - 1);
    bomb += std::string(1, c) + ": &" + c + " [*" + prev + ", *" + prev + ", *" + prev + ", *" +
            prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev +
            ", *" + prev + "]\n";
  }
  bomb += "model: {name: *i}\n";
  const Run r = Paratune("plan --spec " + Write("bomb.yaml", bomb).string());
  EXPECT_EQ(r.exit_code, 2) << r.err.substr(0, 500);
  EXPECT_NE(r.err.find("the document expands to more than 100000 values"), std::string::npos)
      << r.err.substr(0, 500);
  EXPECT_LT(r.seconds, 20);
}

TEST_F(InputBoundsTest, Fp8OnADeviceWithoutFp8UnitsExits2NamingDeviceAndFeature) {
  Run r = Paratune("plan --spec " + Write("fp8.yaml", Spec("", "fp8", "a100-80gb")).string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("training.precision fp8 is not supported by cluster.gpu a100-80gb: the "
                       "device has no FP8 tensor cores"),
            std::string::npos)
      << r.err;
  r = Paratune("plan --spec " + Write("fp8h.yaml", Spec("", "fp8", "h100-sxm-80gb")).string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(InputBoundsTest, TopAndRankArePositiveCountsWithinTheTopKBound) {
  const fs::path spec = Write("base.yaml", Spec());
  for (const std::string top : {"0", "-1", "100001"}) {
    const Run r = Paratune("plan --spec " + spec.string() + " --top " + top);
    EXPECT_EQ(r.exit_code, 2) << top << ": " << r.err;
    EXPECT_NE(r.err.find("--top: Value " + top + " not in range 1 to 100000\n"), std::string::npos)
        << r.err;
  }
  Run r = Paratune("plan --spec " + spec.string() + " --top 2 --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const std::string rank : {"0", "1000000000000"}) {
    r = Paratune("export --spec " + spec.string() + " --format megatron --rank " + rank);
    EXPECT_EQ(r.exit_code, 2) << rank << ": " << r.err;
    EXPECT_NE(r.err.find("--rank: Value " + rank + " not in range 1 to 100000\n"),
              std::string::npos)
        << r.err;
  }
  r = Paratune("export --spec " + spec.string() + " --format megatron --rank 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(InputBoundsTest, WorkerDevicesAreBounded) {
  const Run r = Paratune("--coordinator 127.0.0.1:1 --devices 0-99999", "paratune-worker");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err,
            "paratune-worker: error: --devices: '0-99999' lists more than 1024 devices, the most "
            "one worker registers (see --help)\n");
  EXPECT_LT(r.seconds, 20);
}

}  // namespace
}  // namespace paratune::e2e
