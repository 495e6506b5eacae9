// A stand-in for libFuzzer's main where clang's libFuzzer is not installed (g++ builds):
// runs LLVMFuzzerTestOneInput over every file of the corpus folders, then over random
// mutations of them (bit flips, byte insertions and deletions, splices of two inputs,
// repeated slices) until -max_total_time seconds have passed. It takes the libFuzzer
// flags bench/fuzz.sh passes and prints the same `stat::` lines; a sanitizer report ends
// the process, after the input that caused it is written to -artifact_prefix.
// No coverage feedback: it finds what the sanitizers see on the seeds and their
// neighbours, not what only a coverage-guided search reaches.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" void __sanitizer_set_death_callback(void (*callback)(void));

namespace {

std::string g_artifact_prefix;
const std::string* g_current = nullptr;

// Called by ASan before it ends the process, and on SIGABRT (UBSan with abort_on_error=1:
// g++'s UBSan runtime does not call ASan's death callbacks).
void WriteCurrentInput() {
  if (g_current == nullptr) return;
  const std::string path = g_artifact_prefix + "crash-input";
  std::ofstream(path, std::ios::binary) << *g_current;
  std::cerr << "replay: the input that failed is in " << path << "\n";
  g_current = nullptr;
}

void OnAbort(int sig) {
  WriteCurrentInput();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::string Mutate(const std::vector<std::string>& seeds, std::mt19937_64& rng, size_t max_len) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  std::string s = seeds[pick(seeds.size())];
  const int rounds = 1 + static_cast<int>(pick(8));
  for (int r = 0; r < rounds; ++r) {
    switch (pick(6)) {
      case 0:  // flip a bit
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << pick(8));
        break;
      case 1: {  // insert a byte, often a JSON/YAML structural one
        static constexpr std::string_view kBytes = "{}[]:,\"'&*-!#\n\t 0123456789e.\\";
        const char byte = pick(4) == 0 ? static_cast<char>(rng()) : kBytes[pick(kBytes.size())];
        s.insert(s.begin() + static_cast<std::ptrdiff_t>(pick(s.size() + 1)), byte);
        break;
      }
      case 2:  // delete a slice
        if (!s.empty()) {
          const size_t at = pick(s.size());
          s.erase(at, 1 + pick(std::min<size_t>(16, s.size() - at)));
        }
        break;
      case 3: {  // splice the start of this input with the end of another
        const std::string& other = seeds[pick(seeds.size())];
        s = s.substr(0, pick(s.size() + 1)) + other.substr(pick(other.size() + 1));
        break;
      }
      case 4:  // repeat a slice (deep nesting, long strings)
        if (!s.empty()) {
          const size_t at = pick(s.size());
          const std::string slice = s.substr(at, 1 + pick(8));
          std::string repeated;
          for (size_t k = 0, n = 1 + pick(64); k < n; ++k) repeated += slice;
          s.insert(at, repeated);
        }
        break;
      default:  // overwrite a byte with an arbitrary one
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng());
        break;
    }
  }
  if (s.size() > max_len) s.resize(max_len);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  double max_total_time = 10;
  size_t max_len = 65536;
  std::vector<std::filesystem::path> dirs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const std::string f = std::string("-") + flag + "=";
      return a.rfind(f, 0) == 0 ? argv[i] + f.size() : nullptr;
    };
    if (const char* v = value("max_total_time")) {
      max_total_time = std::atof(v);
    } else if (const char* v = value("max_len")) {
      max_len = static_cast<size_t>(std::atoll(v));
    } else if (const char* v = value("artifact_prefix")) {
      g_artifact_prefix = v;
    } else if (a.rfind("-", 0) == 0) {
      // Other libFuzzer flags (-timeout, -rss_limit_mb, -print_final_stats) do not apply.
    } else {
      dirs.emplace_back(a);
    }
  }
  __sanitizer_set_death_callback(WriteCurrentInput);
  std::signal(SIGABRT, OnAbort);

  std::vector<std::string> seeds;
  for (const auto& dir : dirs) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (text.size() > max_len) text.resize(max_len);
      seeds.push_back(std::move(text));
    }
  }
  if (seeds.empty()) seeds.emplace_back();

  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  uint64_t runs = 0;
  for (const std::string& seed : seeds) {  // every seed once, whatever the time budget
    g_current = &seed;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(seed.data()), seed.size());
    ++runs;
  }
  std::mt19937_64 rng(0x9a7a7u);  // fixed: a failure reproduces with the same budget
  while (elapsed() < max_total_time) {
    const std::string input = Mutate(seeds, rng, max_len);
    g_current = &input;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    ++runs;
  }
  g_current = nullptr;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double seconds = std::max(elapsed(), 1e-9);
  std::printf("Done %llu runs in %.0f second(s)\n", static_cast<unsigned long long>(runs), seconds);
  std::printf("stat::number_of_executed_units: %llu\n", static_cast<unsigned long long>(runs));
  std::printf("stat::average_exec_per_sec:     %.0f\n", static_cast<double>(runs) / seconds);
  std::printf("stat::peak_rss_mb:              %ld\n", usage.ru_maxrss / 1024);
  return 0;
}
