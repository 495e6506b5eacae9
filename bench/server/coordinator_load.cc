// coordinator_load: a realistic mix of clients and simulated workers against a coordinator,
// for a fixed time, with throughput, latency percentiles, errors and the coordinator's
// memory per operation kind.
//
// Scenario "mix" (default): each of --clients clients loops: submit a GPT-3 175B job
// (1024 x a100-80gb; every --profile-every-th submission in profile mode, the others in
// model mode), follow it to its end, then read its results over gRPC and REST. Even
// clients submit over gRPC and follow with the streaming WatchJob; odd clients submit over
// REST and poll GET /v1/jobs/{id}. --workers simulated workers (device kind a100-80gb)
// Register, Heartbeat, LeaseTask (long-poll) and ReportResult: each leased task is "measured"
// for --task-ms and answered with a synthetic result derived from the task's shape and the
// device catalog (layer: GEMM and attention FLOPs at the catalog's efficiencies, TP
// all-reduces at NVLink bandwidth; all-reduce sweep: ring time at NVLink or network bus
// bandwidth), so profile jobs go PROFILING -> COMPOSING -> SUCCEEDED. Every profile job has
// its own vocab_size, so its layer tasks are new work rather than profile-cache hits.
//
// Scenario "submit": clients only submit (alternating gRPC and REST), the old load, which
// shows whether the backlog is bounded.
//
// By default it starts build/bin/paratune-coordinator itself (next to this binary) on free
// ports with a fresh SQLite database and samples its VmRSS from /proc; --grpc-target /
// --http-target aim it at a running one (--coordinator-pid for its memory).
// A submission refused by the coordinator's admission control (RESOURCE_EXHAUSTED, HTTP 429)
// is counted as throttled and the client backs off 100 ms. Any other RPC error (non-OK gRPC
// status, HTTP status other than 200, transport error) is counted
// with its code and message; the program exits 1 when there is one, a wrong answer (empty
// or repeated job id, results of another job, no ranked layout, a profile job with no
// measured layout) or a job that ended FAILED/CANCELLED.
//
// Flat memory: the coordinator's VmRSS is sampled every 0.5 s; its growth over the second
// half of the run is the least-squares slope of those samples times half the duration (a
// slope, so that one allocator step or a single high sample does not decide it). PASS also
// requires that growth to stay under kMaxSecondHalfGrowthMiB (see there), which a
// coordinator whose memory does not depend on how many jobs finished meets and one that
// keeps ~12 KB per finished job at ~1,800 jobs/min (~10 MiB per 30 s) does not.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "paratune/v1/service.grpc.pb.h"
#include "search/device_catalog.h"
#include "search/specs.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr const char* kDeviceKind = "a100-80gb";

// deploy/examples/gpt3-175b.yaml.
paratune::v1::JobSpec Gpt3Spec(bool profile, int64_t vocab_size) {
  paratune::v1::JobSpec spec;
  spec.set_name(profile ? "load-gpt3-175b-profile" : "load-gpt3-175b");
  spec.mutable_model()->set_preset("gpt3-175b");
  if (vocab_size > 0) spec.mutable_model()->set_vocab_size(vocab_size);
  spec.mutable_training()->set_seq_length(2048);
  spec.mutable_training()->set_global_batch_size(1536);
  spec.mutable_training()->set_precision("bf16");
  spec.mutable_cluster()->set_gpu(kDeviceKind);
  spec.mutable_cluster()->set_num_gpus(1024);
  spec.mutable_cluster()->set_gpus_per_node(8);
  spec.mutable_search()->set_top_k(profile ? 4 : 10);
  spec.mutable_search()->set_mode(profile ? "profile" : "model");
  return spec;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// VmRSS and VmHWM (peak) of `pid` in bytes, from /proc/<pid>/status; 0 when unknown.
std::pair<int64_t, int64_t> ReadRss(pid_t pid) {
  if (pid <= 0) return {0, 0};
  std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  int64_t rss = 0, hwm = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    fields >> key >> kib;
    if (key == "VmRSS:") rss = kib * 1024;
    if (key == "VmHWM:") hwm = kib * 1024;
  }
  return {rss, hwm};
}

// User plus system CPU seconds `pid` has used, from /proc/<pid>/stat; 0 when unknown.
double CpuSeconds(pid_t pid) {
  if (pid <= 0) return 0;
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');  // the command name may contain spaces
  if (paren == std::string::npos) return 0;
  std::istringstream in(stat.substr(paren + 2));
  std::string field;
  double ticks = 0;
  // Fields 3.. after the name: state is field 3; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// A coordinator child process on free ports with a temporary database.
class Coordinator {
 public:
  ~Coordinator() { Stop(); }

  bool Start(const std::string& binary, const std::vector<std::string>& extra_args) {
    dir_ = fs::temp_directory_path() / ("paratune_load_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string ports = (dir_ / "ports").string();
    const std::string db = (dir_ / "load.db").string();
    log_ = (dir_ / "coordinator.log").string();
    std::vector<std::string> args = {binary, "--bind",      "127.0.0.1", "--grpc-port",
                                     "0",    "--http-port", "0",         "--db",
                                     db,     "--port-file", ports};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    pid_ = ::fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      std::freopen(log_.c_str(), "w", stdout);
      std::freopen(log_.c_str(), "a", stderr);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      std::istringstream in(ReadFile(ports));
      if (in >> grpc_port_ >> http_port_) return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::cerr << "coordinator_load: the coordinator did not start; its log:\n"
              << ReadFile(log_) << "\n";
    return false;
  }

  // False when the process had already died (its log goes to stderr).
  bool Stop() {
    bool alive = true;
    if (pid_ > 0) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        alive = false;
        std::cerr << "coordinator_load: the coordinator died during the run; its log:\n"
                  << ReadFile(log_) << "\n";
      } else {
        ::kill(pid_, SIGTERM);
        const auto deadline = Clock::now() + std::chrono::seconds(10);
        while (::waitpid(pid_, &status, WNOHANG) == 0) {
          if (Clock::now() > deadline) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, &status, 0);
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
      pid_ = -1;
    }
    if (!dir_.empty()) fs::remove_all(dir_);
    dir_.clear();
    return alive;
  }

  pid_t pid() const { return pid_; }
  /// Bytes of the database and its write-ahead log.
  int64_t DbBytes() const {
    int64_t bytes = 0;
    for (const char* suffix : {"", "-wal"}) {
      std::error_code ec;
      const auto n = fs::file_size(dir_ / (std::string("load.db") + suffix), ec);
      if (!ec) bytes += static_cast<int64_t>(n);
    }
    return bytes;
  }
  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }

 private:
  pid_t pid_ = -1;
  fs::path dir_;
  std::string log_;
  int grpc_port_ = 0;
  int http_port_ = 0;
};

// --- Measurements ---------------------------------------------------------------------------

enum Op {
  kSubmitGrpc,
  kSubmitRest,
  kWatchGrpc,
  kPollRest,
  kResultsGrpc,
  kResultsRest,
  kRegister,
  kHeartbeat,
  kLease,
  kLeaseEmpty,
  kReport,
  kDeregister,
  kJobModel,
  kJobProfile,
  kNumOps
};

const char* OpName(int op) {
  static const char* const kNames[kNumOps] = {
      "submit/grpc",  "submit/rest", "watch/grpc", "poll/rest",  "results/grpc",
      "results/rest", "register",    "heartbeat",  "lease",      "lease/empty",
      "report",       "deregister",  "job/model",  "job/profile"};
  return kNames[op];
}

const char* OpMeaning(int op) {
  static const char* const kMeaning[kNumOps] = {
      "SubmitJob",
      "POST /v1/jobs",
      "WatchJob stream, latency to the first update",
      "GET /v1/jobs/{id} every --poll-ms until the job ends",
      "GetResults",
      "GET /v1/jobs/{id}/results",
      "WorkerHub.Register",
      "WorkerHub.Heartbeat",
      "LeaseTask that returned a task (long-poll: includes the wait for one)",
      "LeaseTask long-poll that ended without a task",
      "ReportResult",
      "Deregister at the end",
      "model-mode job, submit answer to SUCCEEDED seen",
      "profile-mode job, submit answer to SUCCEEDED seen"};
  return kMeaning[op];
}

struct Sample {
  float t_s;  // Start, seconds since the load began.
  float ms;
};

// One thread's measurements; merged at the end.
struct Stats {
  std::vector<Sample> samples[kNumOps];
  int64_t errors[kNumOps] = {};
  int64_t wrong = 0;
  int64_t jobs_submitted = 0, jobs_succeeded = 0, jobs_failed = 0, jobs_unfinished = 0;
  int64_t watch_updates = 0, watches_capped = 0;
  int64_t reports_rejected = 0, tasks_cancelled = 0, reregistered = 0;
  int64_t throttled = 0;  // Submissions refused by admission control (not errors).
  std::map<std::string, int64_t> error_kinds;  // "op: code: message" -> count
  std::map<std::string, int64_t> wrong_kinds;

  void Merge(const Stats& o) {
    for (int i = 0; i < kNumOps; ++i) {
      samples[i].insert(samples[i].end(), o.samples[i].begin(), o.samples[i].end());
      errors[i] += o.errors[i];
    }
    wrong += o.wrong;
    jobs_submitted += o.jobs_submitted;
    jobs_succeeded += o.jobs_succeeded;
    jobs_failed += o.jobs_failed;
    jobs_unfinished += o.jobs_unfinished;
    watch_updates += o.watch_updates;
    watches_capped += o.watches_capped;
    reports_rejected += o.reports_rejected;
    throttled += o.throttled;
    tasks_cancelled += o.tasks_cancelled;
    reregistered += o.reregistered;
    for (const auto& [k, n] : o.error_kinds) error_kinds[k] += n;
    for (const auto& [k, n] : o.wrong_kinds) wrong_kinds[k] += n;
  }
};

// The first few errors in the order they happened, for the report.
class FirstErrors {
 public:
  void Add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (list_.size() < 8) list_.push_back(what);
  }
  std::vector<std::string> list() const {
    std::lock_guard<std::mutex> lock(mu_);
    return list_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> list_;
};

struct Env {
  std::string grpc_target;
  std::string http_host;
  int http_port = 0;
  std::string client_token, worker_token;
  Clock::time_point start, end;
  int profile_every = 4;
  int poll_ms = 100;
  int task_ms = 100;
  double watch_cap_s = 30;
  bool results_grpc = true, results_rest = true;
  std::atomic<int64_t> submissions{0};
  FirstErrors first_errors;

  float Now() const { return std::chrono::duration<float>(Clock::now() - start).count(); }
};

class Recorder {
 public:
  Recorder(Env* env, Stats* stats) : env_(env), stats_(stats) {}
  // A success from `t0` to `t1` (default: now).
  void Ok(Op op, Clock::time_point t0, std::optional<Clock::time_point> t1 = std::nullopt) {
    const float ms =
        std::chrono::duration<float, std::milli>(t1.value_or(Clock::now()) - t0).count();
    stats_->samples[op].push_back({std::chrono::duration<float>(t0 - env_->start).count(), ms});
  }
  void Error(Op op, const std::string& code, const std::string& message) {
    ++stats_->errors[op];
    const std::string what = std::string(OpName(op)) + ": " + code + ": " + message.substr(0, 160);
    ++stats_->error_kinds[what];
    env_->first_errors.Add(what);
  }
  void GrpcError(Op op, const grpc::Status& status) {
    Error(op, "gRPC " + std::to_string(status.error_code()), status.error_message());
  }
  void Wrong(const std::string& what) {
    ++stats_->wrong;
    ++stats_->wrong_kinds[what];
    env_->first_errors.Add("wrong: " + what);
  }
  Stats& stats() { return *stats_; }

 private:
  Env* env_;
  Stats* stats_;
};

std::shared_ptr<grpc::Channel> NewChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per client
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  // Connected before the clock starts; a channel that cannot connect in 10 s shows up as
  // errors of its first calls.
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return channel;
}

void PrepareContext(grpc::ClientContext* context, const std::string& token, double seconds) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
}

std::string ToJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, print);
  return out;
}

// --- Clients --------------------------------------------------------------------------------

class LoadClient {
 public:
  LoadClient(Env* env, Stats* stats, int index)
      : env_(env), rec_(env, stats), index_(index), rest_(env->http_host, env->http_port) {
    stub_ = paratune::v1::Autotuner::NewStub(NewChannel(env->grpc_target));
    rest_.set_keep_alive(true);
    rest_.set_tcp_nodelay(true);
    rest_.set_read_timeout(10, 0);
    if (!env->client_token.empty()) {
      headers_.emplace("Authorization", "Bearer " + env->client_token);
    }
  }

  void RunMix() {
    const bool grpc_side = index_ % 2 == 0;
    while (Clock::now() < env_->end) {
      const int64_t n = env_->submissions.fetch_add(1);
      const bool profile = env_->profile_every > 0 && n % env_->profile_every == 0;
      const paratune::v1::JobSpec spec = Gpt3Spec(profile, profile ? 50257 + n : 0);
      std::optional<std::string> id = grpc_side ? SubmitGrpc(spec) : SubmitRest(spec);
      if (!id) continue;
      const auto acked = Clock::now();
      const std::optional<paratune::v1::JobState> state =
          grpc_side ? WatchGrpc(*id) : PollRest(*id);
      if (!state) {
        ++rec_.stats().jobs_unfinished;
        continue;
      }
      if (*state != paratune::v1::JOB_STATE_SUCCEEDED) {
        ++rec_.stats().jobs_failed;
        rec_.Wrong("job ended " + paratune::v1::JobState_Name(*state));
        continue;
      }
      ++rec_.stats().jobs_succeeded;
      rec_.Ok(profile ? kJobProfile : kJobModel, acked);
      if (env_->results_grpc) ResultsGrpc(*id, profile);
      if (env_->results_rest) ResultsRest(*id, profile);
    }
  }

  void RunSubmitOnly() {
    bool grpc_side = index_ % 2 == 0;
    while (Clock::now() < env_->end) {
      const paratune::v1::JobSpec spec = Gpt3Spec(false, 0);
      if (grpc_side) {
        SubmitGrpc(spec);
      } else {
        SubmitRest(spec);
      }
      grpc_side = !grpc_side;
    }
  }

 private:
  void CheckId(const std::string& id) {
    if (id.empty()) {
      rec_.Wrong("empty job id");
    } else if (!ids_.insert(id).second) {
      rec_.Wrong("job id handed out twice");
    }
  }

  // The coordinator's admission control refused a submission (RESOURCE_EXHAUSTED / 429):
  // back-pressure, not an error; a client backs off before trying again.
  void Throttled() {
    ++rec_.stats().throttled;
    std::this_thread::sleep_until(
        std::min(env_->end, Clock::now() + std::chrono::milliseconds(100)));
  }

  std::optional<std::string> SubmitGrpc(const paratune::v1::JobSpec& spec) {
    paratune::v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    grpc::ClientContext context;
    PrepareContext(&context, env_->client_token, 10);
    paratune::v1::Job job;
    const auto t0 = Clock::now();
    const grpc::Status status = stub_->SubmitJob(&context, request, &job);
    if (!status.ok()) {
      if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        Throttled();
        return std::nullopt;
      }
      rec_.GrpcError(kSubmitGrpc, status);
      return std::nullopt;
    }
    rec_.Ok(kSubmitGrpc, t0);
    ++rec_.stats().jobs_submitted;
    CheckId(job.id());
    return job.id();
  }

  std::optional<std::string> SubmitRest(const paratune::v1::JobSpec& spec) {
    paratune::v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    const std::string body = ToJson(request);
    const auto t0 = Clock::now();
    auto res = rest_.Post("/v1/jobs", headers_, body, "application/json");
    const auto t1 = Clock::now();  // The latency excludes parsing the answer here.
    if (res && res->status == 429) {
      Throttled();
      return std::nullopt;
    }
    std::optional<nlohmann::json> job = RestAnswer(kSubmitRest, res);
    if (!job) return std::nullopt;
    rec_.Ok(kSubmitRest, t0, t1);
    ++rec_.stats().jobs_submitted;
    const std::string id = job->value("id", "");
    CheckId(id);
    return id;
  }

  // The parsed JSON object of a 200 answer, or nullopt after counting the error.
  std::optional<nlohmann::json> RestAnswer(Op op, const httplib::Result& res) {
    if (!res) {
      rec_.Error(op, "HTTP transport", httplib::to_string(res.error()));
      return std::nullopt;
    }
    if (res->status != 200) {
      rec_.Error(op, "HTTP " + std::to_string(res->status), res->body);
      return std::nullopt;
    }
    nlohmann::json json = nlohmann::json::parse(res->body, nullptr, false);
    if (!json.is_object()) {
      rec_.Error(op, "HTTP 200", "answer is not a JSON object: " + res->body.substr(0, 80));
      return std::nullopt;
    }
    return json;
  }

  // Watches until the job ends; nullopt when the run ended or the watch cap hit first.
  std::optional<paratune::v1::JobState> WatchGrpc(const std::string& id) {
    const auto cap =
        Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(env_->watch_cap_s * 1000));
    const auto until = std::min(cap, env_->end);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + (until - Clock::now()));
    if (!env_->client_token.empty()) {
      context.AddMetadata("authorization", "Bearer " + env_->client_token);
    }
    paratune::v1::WatchJobRequest request;
    request.set_id(id);
    const auto t0 = Clock::now();
    std::unique_ptr<grpc::ClientReader<paratune::v1::Job>> reader =
        stub_->WatchJob(&context, request);
    paratune::v1::Job job;
    bool first = true;
    std::optional<paratune::v1::JobState> last;
    while (reader->Read(&job)) {
      if (first) rec_.Ok(kWatchGrpc, t0);
      first = false;
      ++rec_.stats().watch_updates;
      if (job.id() != id) rec_.Wrong("WatchJob sent another job");
      last = job.state();
    }
    const grpc::Status status = reader->Finish();
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && Clock::now() >= until) {
      if (until == cap) ++rec_.stats().watches_capped;
      return std::nullopt;
    }
    if (!status.ok()) {
      rec_.GrpcError(kWatchGrpc, status);
      return std::nullopt;
    }
    if (!last || !IsTerminal(*last)) {
      rec_.Wrong("WatchJob ended before the job did");
      return std::nullopt;
    }
    return last;
  }

  static bool IsTerminal(paratune::v1::JobState s) {
    return s == paratune::v1::JOB_STATE_SUCCEEDED || s == paratune::v1::JOB_STATE_FAILED ||
           s == paratune::v1::JOB_STATE_CANCELLED;
  }

  std::optional<paratune::v1::JobState> PollRest(const std::string& id) {
    const auto cap =
        Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(env_->watch_cap_s * 1000));
    const std::string path = "/v1/jobs/" + id;
    while (true) {
      const auto t0 = Clock::now();
      if (t0 >= env_->end) return std::nullopt;
      if (t0 >= cap) {
        ++rec_.stats().watches_capped;
        return std::nullopt;
      }
      auto res = rest_.Get(path, headers_);
      const auto t1 = Clock::now();
      std::optional<nlohmann::json> job = RestAnswer(kPollRest, res);
      if (!job) return std::nullopt;
      rec_.Ok(kPollRest, t0, t1);
      if (job->value("id", "") != id) rec_.Wrong("GET /v1/jobs/{id} answered another job");
      paratune::v1::JobState state = paratune::v1::JOB_STATE_UNSPECIFIED;
      if (!paratune::v1::JobState_Parse(job->value("state", ""), &state)) {
        rec_.Wrong("GET /v1/jobs/{id}: unknown state");
        return std::nullopt;
      }
      if (IsTerminal(state)) return state;
      std::this_thread::sleep_until(
          std::min(env_->end, t0 + std::chrono::milliseconds(env_->poll_ms)));
    }
  }

  void CheckPlan(const std::string& what, const std::string& job_id, const std::string& id,
                 int ranked, int measured, bool profile) {
    if (job_id != id) rec_.Wrong(what + " answered another job");
    if (ranked == 0) rec_.Wrong(what + ": no ranked layout");
    if (profile && measured == 0) rec_.Wrong(what + ": profile job with no measured layout");
    if (!profile && measured != 0) rec_.Wrong(what + ": model job with a measured layout");
  }

  void ResultsGrpc(const std::string& id, bool profile) {
    paratune::v1::GetResultsRequest request;
    request.set_id(id);
    grpc::ClientContext context;
    PrepareContext(&context, env_->client_token, 10);
    paratune::v1::JobResults results;
    const auto t0 = Clock::now();
    const grpc::Status status = stub_->GetResults(&context, request, &results);
    if (!status.ok()) {
      rec_.GrpcError(kResultsGrpc, status);
      return;
    }
    rec_.Ok(kResultsGrpc, t0);
    int measured = 0;
    for (const auto& r : results.plan().ranked()) measured += r.source() == "measured";
    CheckPlan("GetResults", results.job_id(), id, results.plan().ranked_size(), measured, profile);
  }

  void ResultsRest(const std::string& id, bool profile) {
    const auto t0 = Clock::now();
    auto res = rest_.Get("/v1/jobs/" + id + "/results", headers_);
    const auto t1 = Clock::now();
    std::optional<nlohmann::json> results = RestAnswer(kResultsRest, res);
    if (!results) return;
    rec_.Ok(kResultsRest, t0, t1);
    int ranked = 0, measured = 0;
    if (results->contains("plan") && (*results)["plan"].contains("ranked")) {
      for (const auto& r : (*results)["plan"]["ranked"]) {
        ++ranked;
        measured += r.value("source", "") == "measured";
      }
    }
    CheckPlan("GET /v1/jobs/{id}/results", results->value("job_id", ""), id, ranked, measured,
              profile);
  }

  Env* env_;
  Recorder rec_;
  int index_;
  std::unique_ptr<paratune::v1::Autotuner::Stub> stub_;
  httplib::Client rest_;
  httplib::Headers headers_;
  std::set<std::string> ids_;
};

// --- Simulated workers ------------------------------------------------------------------------

// A plausible measurement of `task` on `device`: what a worker of that kind would report.
paratune::v1::TaskResult SyntheticResult(const paratune::v1::ProfileTask& task,
                                         const paratune::DeviceProfile& device) {
  paratune::v1::TaskResult result;
  result.set_task_id(task.id());
  result.set_attempt(task.attempt());
  result.set_outcome(paratune::v1::TaskResult::OUTCOME_OK);
  // Measurement noise: a fixed +-2 % from the task key, so that results are reproducible.
  const double noise =
      1.0 + 0.02 * (static_cast<double>(std::hash<std::string>{}(task.key()) % 201) / 100.0 - 1.0);
  if (task.has_layer()) {
    const paratune::v1::LayerProfileTask& l = task.layer();
    const paratune::v1::LayerShape& s = l.shape();
    const double h = static_cast<double>(s.hidden_size());
    const double a = static_cast<double>(std::max<int64_t>(1, s.num_attention_heads()));
    const double g = s.num_query_groups() > 0 ? static_cast<double>(s.num_query_groups()) : a;
    const double f = s.ffn_hidden_size() > 0 ? static_cast<double>(s.ffn_hidden_size()) : 4 * h;
    const double tp = static_cast<double>(std::max<int64_t>(1, l.tp()));
    const double cp = static_cast<double>(std::max<int64_t>(1, l.cp()));
    const double seq = static_cast<double>(l.seq_length());
    const double tokens = static_cast<double>(l.micro_batch_size()) * seq / cp;
    const double mlp_mats = s.activation() == "swiglu" ? 3 : 2;
    double gemm = 2 * tokens * (h * (h + 2 * h * g / a) + h * h + mlp_mats * h * f) / tp;
    if (l.extras() == paratune::v1::LayerProfileTask::STAGE_EXTRAS_LAST) {
      gemm += 2 * tokens * h * static_cast<double>(s.vocab_size()) / tp;
    }
    const double attention = 2 * tokens * seq * h / tp;  // causal half of 4 * tokens * seq * h
    paratune::Precision precision = paratune::Precision::kBf16;
    if (auto p = paratune::ParsePrecision(l.dtype()); p.ok()) precision = *p;
    const double peak = device.PeakFlops(precision);
    const double attention_s =
        attention / (peak * device.attention_efficiency) + 8 * device.kernel_launch_s;
    const double forward =
        gemm / (peak * device.gemm_efficiency) + attention_s + 12 * device.kernel_launch_s;
    const double backward = 2 * forward;
    const double recompute =
        l.recompute() == "full" ? forward : (l.recompute() == "selective" ? attention_s : 0);
    double tp_comm = 0;
    if (tp > 1) {  // Two all-reduces (or gather/scatter pairs) forward, two backward.
      const double bytes = tokens * h * 2;
      tp_comm = 4 * (2 * (tp - 1) / tp * bytes / device.nvlink_bandwidth +
                     2 * (tp - 1) * device.nvlink_latency_s);
    }
    paratune::v1::LayerProfile* layer = result.mutable_layer();
    auto add = [&](const char* phase, double seconds) {
      paratune::v1::PhaseTiming* p = layer->add_phases();
      p->set_phase(phase);
      p->set_median_s(seconds * noise);
      p->set_min_s(seconds * noise * 0.99);
      p->set_max_s(seconds * noise * 1.03);
    };
    add("forward", forward);
    add("backward", backward);
    if (recompute > 0) add("recompute", recompute);
    if (tp_comm > 0) add("tp_comm", tp_comm);
    add("total", forward + backward + recompute + tp_comm);
    // Mixed-precision Adam state (18 bytes per parameter) plus the layer's activations.
    const double params = (h * (h + 2 * h * g / a) + h * h + mlp_mats * h * f) / tp;
    const double activations = l.recompute() == "full" ? tokens * h * 2 : tokens * h * 34 / tp;
    const auto peak_bytes = static_cast<int64_t>(params * 18 + activations);
    for (int64_t r = 0; r < static_cast<int64_t>(tp); ++r)
      layer->add_peak_bytes_per_rank(peak_bytes);
    layer->set_device_peak_bytes(peak_bytes);
    layer->set_activation_bytes(static_cast<int64_t>(activations));
    result.set_elapsed_s((forward + backward + recompute + tp_comm) *
                         static_cast<double>(l.warmup() + l.iters()));
  } else if (task.has_collective()) {
    const paratune::v1::CollectiveSweepTask& c = task.collective();
    const double n = static_cast<double>(std::max<int64_t>(2, c.group_size()));
    const bool intra = n <= 8;
    const double busbw = (intra ? device.nvlink_bandwidth : device.network_bandwidth) * 0.8;
    const double latency = intra ? device.nvlink_latency_s : device.network_latency_s;
    double elapsed = 0;
    for (int64_t size : c.sizes_bytes()) {
      const double bus_bytes = 2 * (n - 1) / n * static_cast<double>(size);
      const double time = (bus_bytes / busbw + 2 * (n - 1) * latency) * noise;
      paratune::v1::CommSample* sample = result.mutable_comm()->add_samples();
      sample->set_size_bytes(size);
      sample->set_time_s(time);
      sample->set_algbw_gbps(static_cast<double>(size) / time / 1e9);
      sample->set_busbw_gbps(bus_bytes / time / 1e9);
      elapsed += time * static_cast<double>(c.warmup() + c.iters());
    }
    result.set_elapsed_s(elapsed);
  } else {
    result.set_outcome(paratune::v1::TaskResult::OUTCOME_UNSUPPORTED);
    result.set_message("simulated worker: unknown task kind");
  }
  return result;
}

class SimWorker {
 public:
  SimWorker(Env* env, Stats* stats, int index, const paratune::DeviceProfile& device)
      : env_(env), rec_(env, stats), index_(index), device_(device) {
    stub_ = paratune::v1::WorkerHub::NewStub(NewChannel(env->grpc_target));
  }

  void Run() {
    while (Clock::now() < env_->end && !Register()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    while (Clock::now() < env_->end) {
      MaybeHeartbeat("");
      std::optional<paratune::v1::ProfileTask> task = Lease();
      if (!task) continue;
      // "Measure" for task_ms, heartbeating the lease meanwhile.
      const auto done = Clock::now() + std::chrono::milliseconds(env_->task_ms);
      bool cancelled = false;
      while (Clock::now() < done && !cancelled) {
        std::this_thread::sleep_until(std::min(done, Clock::now() + std::chrono::milliseconds(20)));
        cancelled = MaybeHeartbeat(task->id());
      }
      if (cancelled) {
        ++rec_.stats().tasks_cancelled;
        continue;
      }
      if (Clock::now() >= env_->end) break;  // The run ended mid-measurement.
      Report(*task);
    }
    paratune::v1::DeregisterRequest request;
    request.set_worker_id(worker_id_);
    grpc::ClientContext context;
    PrepareContext(&context, env_->worker_token, 10);
    paratune::v1::DeregisterResponse response;
    const auto t0 = Clock::now();
    const grpc::Status status = stub_->Deregister(&context, request, &response);
    if (status.ok()) {
      rec_.Ok(kDeregister, t0);
    } else {
      rec_.GrpcError(kDeregister, status);
    }
  }

 private:
  bool Register() {
    paratune::v1::RegisterRequest request;
    paratune::v1::WorkerInfo* info = request.mutable_worker();
    info->set_id(worker_id_);  // Empty the first time; kept when registering again.
    info->set_name("sim-worker-" + std::to_string(index_));
    info->set_backend("cuda");
    info->set_device_kind(kDeviceKind);
    for (int d = 0; d < 8; ++d) {
      paratune::v1::Device* dev = info->add_devices();
      dev->set_index(d);
      dev->set_name("NVIDIA A100-SXM4-80GB (simulated)");
      dev->set_memory_bytes(static_cast<int64_t>(device_.memory_bytes));
    }
    info->set_cpu_cores(64);
    info->set_memory_bytes(int64_t{1} << 40);
    grpc::ClientContext context;
    PrepareContext(&context, env_->worker_token, 10);
    paratune::v1::RegisterResponse response;
    const auto t0 = Clock::now();
    const grpc::Status status = stub_->Register(&context, request, &response);
    if (!status.ok()) {
      rec_.GrpcError(kRegister, status);
      return false;
    }
    rec_.Ok(kRegister, t0);
    worker_id_ = response.worker_id();
    if (worker_id_.empty()) rec_.Wrong("Register returned no worker id");
    heartbeat_every_ =
        std::chrono::milliseconds(std::max<int64_t>(50, response.heartbeat_interval_ms()));
    last_heartbeat_ = Clock::now();
    return true;
  }

  // Heartbeats when due; true when the coordinator asks to stop `task_id`.
  bool MaybeHeartbeat(const std::string& task_id) {
    if (Clock::now() - last_heartbeat_ < heartbeat_every_) return false;
    paratune::v1::HeartbeatRequest request;
    request.set_worker_id(worker_id_);
    if (!task_id.empty()) request.add_task_ids(task_id);
    grpc::ClientContext context;
    PrepareContext(&context, env_->worker_token, 10);
    paratune::v1::HeartbeatResponse response;
    const auto t0 = Clock::now();
    const grpc::Status status = stub_->Heartbeat(&context, request, &response);
    last_heartbeat_ = Clock::now();
    if (!status.ok()) {
      rec_.GrpcError(kHeartbeat, status);
      return false;
    }
    rec_.Ok(kHeartbeat, t0);
    if (response.reregister()) {
      ++rec_.stats().reregistered;
      Register();
      return !task_id.empty();
    }
    for (const std::string& id : response.cancel_task_ids()) {
      if (id == task_id) return true;
    }
    return false;
  }

  std::optional<paratune::v1::ProfileTask> Lease() {
    paratune::v1::LeaseTaskRequest request;
    request.set_worker_id(worker_id_);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(env_->end - Clock::now());
    const int64_t wait_ms = std::clamp<int64_t>(
        std::min<int64_t>(
            left.count(),
            std::chrono::duration_cast<std::chrono::milliseconds>(heartbeat_every_).count()),
        0, 1000);
    request.set_wait_ms(wait_ms);
    grpc::ClientContext context;
    PrepareContext(&context, env_->worker_token, 10 + static_cast<double>(wait_ms) / 1000);
    paratune::v1::LeaseTaskResponse response;
    const auto t0 = Clock::now();
    const grpc::Status status = stub_->LeaseTask(&context, request, &response);
    if (!status.ok()) {
      rec_.GrpcError(kLease, status);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return std::nullopt;
    }
    if (!response.has_task()) {
      rec_.Ok(kLeaseEmpty, t0);
      return std::nullopt;
    }
    rec_.Ok(kLease, t0);
    if (response.task().device_kind() != kDeviceKind) {
      rec_.Wrong("a " + response.task().device_kind() + " task leased to an " + kDeviceKind +
                 " worker");
    }
    return response.task();
  }

  void Report(const paratune::v1::ProfileTask& task) {
    paratune::v1::ReportResultRequest request;
    request.set_worker_id(worker_id_);
    *request.mutable_result() = SyntheticResult(task, device_);
    request.mutable_result()->set_worker_id(worker_id_);
    grpc::ClientContext context;
    PrepareContext(&context, env_->worker_token, 10);
    paratune::v1::ReportResultResponse response;
    const auto t0 = Clock::now();
    const grpc::Status status = stub_->ReportResult(&context, request, &response);
    if (!status.ok()) {
      rec_.GrpcError(kReport, status);
      return;
    }
    rec_.Ok(kReport, t0);
    if (!response.accepted()) ++rec_.stats().reports_rejected;
  }

  Env* env_;
  Recorder rec_;
  int index_;
  const paratune::DeviceProfile& device_;
  std::unique_ptr<paratune::v1::WorkerHub::Stub> stub_;
  std::string worker_id_;
  Clock::duration heartbeat_every_ = std::chrono::seconds(5);
  Clock::time_point last_heartbeat_;
};

// --- Monitoring -------------------------------------------------------------------------------

// /metrics gauges: paratune_jobs{state="..."} and paratune_tasks{state="..."}.
// Empty when the gateway did not answer within `timeout_s` (e.g. every HTTP thread is held
// by a keep-alive client).
std::map<std::string, double> ScrapeGauges(const std::string& host, int port, int timeout_s) {
  std::map<std::string, double> out;
  if (port <= 0) return out;
  httplib::Client client(host, port);
  client.set_connection_timeout(timeout_s, 0);
  client.set_read_timeout(timeout_s, 0);
  client.set_write_timeout(timeout_s, 0);
  auto res = client.Get("/metrics");
  if (!res || res->status != 200) return out;
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);) {
    for (const std::string family : {"paratune_jobs", "paratune_tasks", "paratune_workers"}) {
      const std::string prefix = family + "{state=\"";
      if (line.rfind(prefix, 0) != 0) continue;
      const size_t q = line.find('"', prefix.size());
      const size_t sp = line.rfind(' ');
      if (q == std::string::npos || sp == std::string::npos) continue;
      out[family.substr(9) + "/" + line.substr(prefix.size(), q - prefix.size())] =
          std::stod(line.substr(sp + 1));
    }
  }
  return out;
}

// The bound on the coordinator's RSS growth over the second half of the run. The first
// half warms up (connections, the SQLite page cache, the results LRU, the newest finished
// jobs kept whole fill up); afterwards a bounded process grows only by its compact entries
// of finished jobs (about 0.2 KB each, ~2 MiB in the second half of a 10-minute run).
// A leak of 12 KB per finished job at ~30 jobs/s grows ~21 MiB/min: 10 MiB over the second
// half of a 60 s run, 105 MiB over that of a 10-minute run.
constexpr double kMaxSecondHalfGrowthMiB = 5.0;

// Least-squares slope (bytes per second) of the samples at or after `from_s`; 0 with fewer
// than two.
double RssSlope(const std::vector<std::pair<double, int64_t>>& samples, double from_s) {
  double n = 0, st = 0, sr = 0, stt = 0, str = 0;
  for (const auto& [t, rss] : samples) {
    if (t < from_s) continue;
    const double r = static_cast<double>(rss);
    n += 1;
    st += t;
    sr += r;
    stt += t * t;
    str += t * r;
  }
  const double denom = n * stt - st * st;
  if (n < 2 || denom <= 0) return 0;
  return (n * str - st * sr) / denom;
}

struct Tick {
  double t_s = 0;
  int64_t rss = 0;
  std::map<std::string, double> gauges;
};

bool SplitHostPort(const std::string& target, std::string* host, int* port) {
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos) return false;
  *host = target.substr(0, colon);
  try {
    *port = std::stoi(target.substr(colon + 1));
  } catch (...) {
    return false;
  }
  return *port > 0 && *port < 65536;
}

double Percentile(std::vector<float> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

double Unfinished(const std::map<std::string, double>& g) {
  double n = 0;
  for (const char* s : {"jobs/pending", "jobs/planning", "jobs/profiling", "jobs/composing"}) {
    auto it = g.find(s);
    if (it != g.end()) n += it->second;
  }
  return n;
}

double Gauge(const std::map<std::string, double>& g, const std::string& key) {
  auto it = g.find(key);
  return it == g.end() ? 0 : it->second;
}

double LoadAverage() {
  std::istringstream in(ReadFile("/proc/loadavg"));
  double one = 0;
  in >> one;
  return one;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "coordinator_load: clients (submit, watch, results) and simulated workers "
      "(register, heartbeat, lease, report) against a coordinator"};
  double duration = 60;
  int clients = 64;
  int workers = 16;
  std::string scenario = "mix";
  int profile_every = 4;
  int task_ms = 100;
  int poll_ms = 100;
  double watch_cap_s = 30;
  std::string results = "both";
  std::string coordinator_bin;
  std::vector<std::string> coordinator_args;
  std::string grpc_target, http_target, client_token_file, worker_token_file;
  int coordinator_pid = 0;
  bool json_output = false;
  app.add_option("--duration-s,--duration", duration, "Seconds of load")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--clients", clients, "Concurrent clients")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--workers", workers, "Simulated workers (mix scenario)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--scenario", scenario,
                 "mix: submit, follow, read results, with workers; submit: submissions only")
      ->capture_default_str()
      ->check(CLI::IsMember({"mix", "submit"}));
  app.add_option("--profile-every", profile_every,
                 "Every n-th submission is a profile-mode job (0 = none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  app.add_option("--task-ms", task_ms, "Simulated measuring time per leased task")
      ->capture_default_str()
      ->check(CLI::Range(0, 600000));
  app.add_option("--results", results, "Read each finished job's results over grpc, rest or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"grpc", "rest", "both"}));
  app.add_option("--poll-ms", poll_ms, "REST clients poll their job this often")
      ->capture_default_str()
      ->check(CLI::Range(1, 60000));
  app.add_option("--watch-cap-s", watch_cap_s,
                 "A client gives up following a job after this long (counted, not an error)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--coordinator-bin", coordinator_bin,
                 "Coordinator to start (default: paratune-coordinator next to this binary)");
  app.add_option("--coordinator-arg", coordinator_args,
                 "Extra argument for the started coordinator (repeat; e.g. "
                 "--coordinator-arg=--max-attempts --coordinator-arg=5)");
  app.add_option("--grpc-target", grpc_target,
                 "host:port of a running coordinator's gRPC server (no coordinator started)");
  app.add_option("--http-target", http_target,
                 "host:port of a running coordinator's REST gateway (needed with --grpc-target)");
  app.add_option("--coordinator-pid", coordinator_pid,
                 "pid of the running coordinator, for its memory (with --grpc-target)");
  app.add_option("--client-token-file", client_token_file, "Client bearer token");
  app.add_option("--worker-token-file", worker_token_file, "Worker bearer token");
  app.add_flag("--json", json_output, "Print one JSON object instead of the table");
  CLI11_PARSE(app, argc, argv);

  auto device = paratune::FindDevice(kDeviceKind);
  if (!device.ok()) {
    std::cerr << "coordinator_load: " << device.status() << "\n";
    return 1;
  }

  Env env;
  env.client_token = client_token_file.empty() ? "" : Trim(ReadFile(client_token_file));
  env.worker_token = worker_token_file.empty() ? "" : Trim(ReadFile(worker_token_file));
  env.profile_every = profile_every;
  env.task_ms = task_ms;
  env.poll_ms = poll_ms;
  env.watch_cap_s = watch_cap_s;
  env.results_grpc = results != "rest";
  env.results_rest = results != "grpc";

  std::optional<Coordinator> coordinator;
  const bool external = !grpc_target.empty() || !http_target.empty();
  pid_t pid = 0;
  if (external) {
    std::string grpc_host;
    int grpc_port = 0;
    if (!SplitHostPort(grpc_target, &grpc_host, &grpc_port) ||
        !SplitHostPort(http_target, &env.http_host, &env.http_port)) {
      std::cerr << "coordinator_load: --grpc-target and --http-target must both be host:port\n";
      return 2;
    }
    env.grpc_target = grpc_target;
    pid = coordinator_pid;
  } else {
    if (coordinator_bin.empty()) {
      coordinator_bin = (fs::path(argv[0]).parent_path() / "paratune-coordinator").string();
    }
    if (!fs::exists(coordinator_bin)) {
      std::cerr << "coordinator_load: no coordinator binary at " << coordinator_bin << "\n";
      return 1;
    }
    // Heartbeats every second (default 5 s) so that a minute sees a few hundred of them.
    std::vector<std::string> args = {"--heartbeat-interval-ms", "1000"};
    args.insert(args.end(), coordinator_args.begin(), coordinator_args.end());
    coordinator.emplace();
    if (!coordinator->Start(coordinator_bin, args)) return 1;
    env.grpc_target = "127.0.0.1:" + std::to_string(coordinator->grpc_port());
    env.http_host = "127.0.0.1";
    env.http_port = coordinator->http_port();
    pid = coordinator->pid();
  }
  if (scenario == "submit") workers = 0;

  const double load_before = LoadAverage();
  const int64_t rss_before = ReadRss(pid).first;
  const double cpu_before = CpuSeconds(pid);
  const std::map<std::string, double> gauges_before =
      ScrapeGauges(env.http_host, env.http_port, 10);

  // Clients and workers build their connections first; the clock starts when all are ready.
  std::vector<Stats> client_stats(clients), worker_stats(workers);
  std::vector<std::unique_ptr<LoadClient>> load_clients;
  std::vector<std::unique_ptr<SimWorker>> sim_workers;
  for (int c = 0; c < clients; ++c) {
    load_clients.push_back(std::make_unique<LoadClient>(&env, &client_stats[c], c));
  }
  for (int w = 0; w < workers; ++w) {
    sim_workers.push_back(std::make_unique<SimWorker>(&env, &worker_stats[w], w, *device));
  }
  env.start = Clock::now();
  env.end = env.start +
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) threads.emplace_back([&, w] { sim_workers[w]->Run(); });
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      if (scenario == "mix") {
        load_clients[c]->RunMix();
      } else {
        load_clients[c]->RunSubmitOnly();
      }
    });
  }

  // Memory every 0.5 s, gauges every tick_s.
  std::vector<Tick> ticks;
  int64_t rss_peak_sampled = rss_before;
  std::vector<std::pair<double, int64_t>> rss_samples;  // (t_s, bytes), every 0.5 s.
  const double tick_s = std::max(1.0, duration / 12);
  double next_tick = tick_s;
  double load_max = load_before;
  while (Clock::now() < env.end) {
    std::this_thread::sleep_until(std::min(env.end, Clock::now() + std::chrono::milliseconds(500)));
    const int64_t rss_now = ReadRss(pid).first;
    const double t = env.Now();
    rss_peak_sampled = std::max(rss_peak_sampled, rss_now);
    if (rss_now > 0) rss_samples.push_back({t, rss_now});
    load_max = std::max(load_max, LoadAverage());
    if (t + 0.25 >= next_tick) {
      ticks.push_back({t, ReadRss(pid).first, ScrapeGauges(env.http_host, env.http_port, 2)});
      next_tick += tick_s;
    }
  }
  for (auto& t : threads) t.join();
  const double wall = env.Now();
  const auto [rss_after, rss_hwm] = ReadRss(pid);
  const double cpu_s = CpuSeconds(pid) - cpu_before;
  rss_peak_sampled = std::max(rss_peak_sampled, rss_after);
  const std::map<std::string, double> gauges_after = ScrapeGauges(env.http_host, env.http_port, 10);
  const int64_t db_bytes = coordinator ? coordinator->DbBytes() : 0;
  bool coordinator_alive = true;
  if (coordinator) coordinator_alive = coordinator->Stop();

  Stats total;
  for (const Stats& s : client_stats) total.Merge(s);
  for (const Stats& s : worker_stats) total.Merge(s);
  int64_t errors = 0;
  for (int op = 0; op < kNumOps; ++op) errors += total.errors[op];
  // Growth over the second half: the fitted slope there times its length.
  const double mib = 1 << 20;
  const double rss_slope_mib_per_s = RssSlope(rss_samples, duration / 2) / mib;
  const double growth_2nd_half_mib = rss_slope_mib_per_s * duration / 2;
  const double growth_mib_per_min = rss_slope_mib_per_s * 60;
  // Memory unknown (external coordinator without --coordinator-pid) is not judged.
  const auto second_half_samples =
      std::count_if(rss_samples.begin(), rss_samples.end(),
                    [&](const auto& s) { return s.first >= duration / 2; });
  const bool memory_known = second_half_samples >= 2;
  const bool memory_flat = !memory_known || growth_2nd_half_mib < kMaxSecondHalfGrowthMiB;
  const bool pass = coordinator_alive && errors == 0 && total.wrong == 0 &&
                    total.jobs_failed == 0 && total.jobs_submitted > 0 && memory_flat;

  nlohmann::json rows = nlohmann::json::array();
  for (int op = 0; op < kNumOps; ++op) {
    std::vector<float> ms;
    ms.reserve(total.samples[op].size());
    for (const Sample& s : total.samples[op]) ms.push_back(s.ms);
    if (ms.empty() && total.errors[op] == 0) continue;
    rows.push_back({{"op", OpName(op)},
                    {"what", OpMeaning(op)},
                    {"count", ms.size()},
                    {"per_s", static_cast<double>(ms.size()) / duration},
                    {"p50_ms", Percentile(ms, 50)},
                    {"p99_ms", Percentile(ms, 99)},
                    {"max_ms", ms.empty() ? 0.0 : *std::max_element(ms.begin(), ms.end())},
                    {"errors", total.errors[op]}});
  }
  // Latency over time: submissions (both transports) per tick window.
  nlohmann::json timeline = nlohmann::json::array();
  double prev_t = 0;
  for (const Tick& tick : ticks) {
    std::vector<float> submit_ms, read_ms;
    for (int op : {kSubmitGrpc, kSubmitRest}) {
      for (const Sample& s : total.samples[op]) {
        if (s.t_s >= prev_t && s.t_s < tick.t_s) submit_ms.push_back(s.ms);
      }
    }
    for (int op : {kPollRest, kResultsGrpc, kResultsRest, kWatchGrpc}) {
      for (const Sample& s : total.samples[op]) {
        if (s.t_s >= prev_t && s.t_s < tick.t_s) read_ms.push_back(s.ms);
      }
    }
    const bool scraped = !tick.gauges.empty();  // -1: /metrics did not answer within 2 s
    timeline.push_back({{"t_s", tick.t_s},
                        {"rss_mib", static_cast<double>(tick.rss) / (1 << 20)},
                        {"jobs_unfinished", scraped ? Unfinished(tick.gauges) : -1},
                        {"jobs_succeeded", scraped ? Gauge(tick.gauges, "jobs/succeeded") : -1},
                        {"tasks_queued", scraped ? Gauge(tick.gauges, "tasks/queued") : -1},
                        {"submits", submit_ms.size()},
                        {"submit_p99_ms", Percentile(submit_ms, 99)},
                        {"reads", read_ms.size()},
                        {"read_p99_ms", Percentile(read_ms, 99)}});
    prev_t = tick.t_s;
  }
  nlohmann::json summary = {{"benchmark", "coordinator_load"},
                            {"scenario", scenario},
                            {"clients", clients},
                            {"workers", workers},
                            {"duration_s", duration},
                            {"wall_s", wall},
                            {"profile_every", profile_every},
                            {"task_ms", task_ms},
                            {"results", results},
                            {"load_average_1m", {{"before", load_before}, {"max", load_max}}},
                            {"rows", rows},
                            {"timeline", timeline},
                            {"coordinator_rss_mib",
                             {{"before", static_cast<double>(rss_before) / mib},
                              {"after", static_cast<double>(rss_after) / mib},
                              {"peak_sampled", static_cast<double>(rss_peak_sampled) / mib},
                              {"peak_vmhwm", static_cast<double>(rss_hwm) / mib},
                              {"growth_second_half", growth_2nd_half_mib},
                              {"growth_per_min", growth_mib_per_min},
                              {"growth_bound", kMaxSecondHalfGrowthMiB},
                              {"flat", memory_flat}}},
                            {"coordinator_db_mib", static_cast<double>(db_bytes) / mib},
                            {"coordinator_cpu_s", cpu_s},
                            {"jobs",
                             {{"submitted", total.jobs_submitted},
                              {"succeeded_seen", total.jobs_succeeded},
                              {"failed_seen", total.jobs_failed},
                              {"unfinished_when_run_ended", total.jobs_unfinished},
                              {"watches_capped", total.watches_capped},
                              {"coordinator_before", gauges_before},
                              {"coordinator_after", gauges_after}}},
                            {"workers_detail",
                             {{"reports_rejected", total.reports_rejected},
                              {"submissions_throttled", total.throttled},
                              {"tasks_cancelled", total.tasks_cancelled},
                              {"reregistered", total.reregistered}}},
                            {"errors", errors},
                            {"error_kinds", total.error_kinds},
                            {"wrong", total.wrong},
                            {"wrong_kinds", total.wrong_kinds},
                            {"first_errors", env.first_errors.list()},
                            {"coordinator_alive", coordinator_alive},
                            {"pass", pass}};

  if (json_output) {
    std::cout << summary.dump(2) << "\n";
    return pass ? 0 : 1;
  }

  std::printf(
      "# ParaTune coordinator load, scenario %s: %d clients, %d simulated workers, %.0f s\n",
      scenario.c_str(), clients, workers, duration);
  std::printf(
      "# jobs: gpt3-175b on 1024 x a100-80gb; every %d-th submission profile mode "
      "(top_k 4, unique vocab), the rest model mode (top_k 10); tasks take %d ms\n",
      profile_every, task_ms);
  std::printf(
      "# coordinator: %s; results read over %s; load average (1 min) %.1f before, max "
      "%.1f during\n",
      external ? "given" : coordinator_bin.c_str(), results.c_str(), load_before, load_max);
  std::printf("#\n");
  std::printf("# %12s %9s %9s %9s %9s %9s %7s\n", "op", "count", "rate", "p50", "p99", "max",
              "errors");
  std::printf("# %12s %9s %9s %9s %9s %9s %7s\n", "", "", "ops/s", "ms", "ms", "ms", "");
  for (const nlohmann::json& r : rows) {
    std::printf("  %12s %9zu %9.1f %9.2f %9.2f %9.2f %7lld\n", r["op"].get<std::string>().c_str(),
                r["count"].get<size_t>(), r["per_s"].get<double>(), r["p50_ms"].get<double>(),
                r["p99_ms"].get<double>(), r["max_ms"].get<double>(),
                static_cast<long long>(r["errors"].get<int64_t>()));
  }
  std::printf("#\n# over time (window ending at t; -1: /metrics did not answer within 2 s):\n");
  std::printf("# %6s %8s %10s %10s %8s %8s %10s %8s %10s\n", "t", "rss", "unfinished", "succeeded",
              "queued", "submits", "submit p99", "reads", "read p99");
  std::printf("# %6s %8s %10s %10s %8s %8s %10s %8s %10s\n", "s", "MiB", "jobs", "jobs", "tasks",
              "", "ms", "", "ms");
  for (const nlohmann::json& t : timeline) {
    std::printf("  %6.1f %8.1f %10.0f %10.0f %8.0f %8zu %10.2f %8zu %10.2f\n",
                t["t_s"].get<double>(), t["rss_mib"].get<double>(),
                t["jobs_unfinished"].get<double>(), t["jobs_succeeded"].get<double>(),
                t["tasks_queued"].get<double>(), t["submits"].get<size_t>(),
                t["submit_p99_ms"].get<double>(), t["reads"].get<size_t>(),
                t["read_p99_ms"].get<double>());
  }
  std::printf("#\n");
  std::printf(
      "# coordinator RSS: %.1f MiB before, %.1f MiB after, peak %.1f MiB (VmHWM %.1f); "
      "database %.1f MiB; coordinator CPU %.1f s\n",
      static_cast<double>(rss_before) / mib, static_cast<double>(rss_after) / mib,
      static_cast<double>(rss_peak_sampled) / mib, static_cast<double>(rss_hwm) / mib,
      static_cast<double>(db_bytes) / mib, cpu_s);
  if (memory_known) {
    std::printf(
        "# coordinator RSS over the second half: %+.1f MiB (%+.2f MiB/min, least-squares over "
        "%zu samples at 0.5 s); bound %.1f MiB: %s\n",
        growth_2nd_half_mib, growth_mib_per_min, static_cast<size_t>(second_half_samples),
        kMaxSecondHalfGrowthMiB, memory_flat ? "flat" : "GROWING");
  } else {
    std::printf("# coordinator RSS unknown (no pid): memory not judged\n");
  }
  std::printf(
      "# jobs: %lld submitted, %lld seen SUCCEEDED, %lld seen FAILED/CANCELLED, %lld "
      "still running when the run ended (%lld watches capped at %.0f s)\n",
      static_cast<long long>(total.jobs_submitted), static_cast<long long>(total.jobs_succeeded),
      static_cast<long long>(total.jobs_failed), static_cast<long long>(total.jobs_unfinished),
      static_cast<long long>(total.watches_capped), watch_cap_s);
  if (!gauges_after.empty()) {
    std::printf("# coordinator at the end: jobs");
    for (const auto& [k, n] : gauges_after) {
      if (k.rfind("jobs/", 0) == 0 && n > 0) std::printf(" %s %.0f", k.substr(5).c_str(), n);
    }
    std::printf("; tasks");
    for (const auto& [k, n] : gauges_after) {
      if (k.rfind("tasks/", 0) == 0) std::printf(" %s %.0f", k.substr(6).c_str(), n);
    }
    std::printf("\n");
  }
  if (workers > 0) {
    std::printf(
        "# workers: %lld reports rejected (late/duplicate), %lld tasks stopped by the "
        "coordinator, %lld re-registrations\n",
        static_cast<long long>(total.reports_rejected),
        static_cast<long long>(total.tasks_cancelled), static_cast<long long>(total.reregistered));
  }
  if (total.throttled > 0) {
    std::printf(
        "# admission control: %lld submissions refused with RESOURCE_EXHAUSTED / HTTP "
        "429 (each client backed off 100 ms; not errors)\n",
        static_cast<long long>(total.throttled));
  }
  for (const auto& [kind, n] : total.error_kinds) {
    std::printf("# error x%lld: %s\n", static_cast<long long>(n), kind.c_str());
  }
  for (const auto& [kind, n] : total.wrong_kinds) {
    std::printf("# wrong x%lld: %s\n", static_cast<long long>(n), kind.c_str());
  }
  const std::vector<std::string> first = env.first_errors.list();
  for (size_t i = 0; i < first.size(); ++i) {
    std::printf("# first error %zu: %s\n", i + 1, first[i].c_str());
  }
  int64_t ops = 0;
  for (const nlohmann::json& r : rows) {
    const std::string op = r["op"].get<std::string>();
    if (op != "job/model" && op != "job/profile") ops += r["count"].get<int64_t>();
  }
  std::printf(
      "# summary: %lld ops in %.0f s (%.0f ops/s), %lld errors, %lld wrong, %lld jobs "
      "finished of %lld submitted, RSS %.0f -> %.0f MiB (peak %.0f), second half %+.1f MiB "
      "(%+.2f MiB/min, %s): %s\n",
      static_cast<long long>(ops), duration, static_cast<double>(ops) / duration,
      static_cast<long long>(errors), static_cast<long long>(total.wrong),
      static_cast<long long>(total.jobs_succeeded + total.jobs_failed),
      static_cast<long long>(total.jobs_submitted), static_cast<double>(rss_before) / mib,
      static_cast<double>(rss_after) / mib, static_cast<double>(rss_peak_sampled) / mib,
      growth_2nd_half_mib, growth_mib_per_min,
      !memory_known ? "not judged"
      : memory_flat ? "flat"
                    : "growing",
      pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
