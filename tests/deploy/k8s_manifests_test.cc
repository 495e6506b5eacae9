// The deployment files agree with each other and with the binaries:
//   - deploy/k8s/*.yaml: every manifest is in the kustomization and the paratune namespace;
//     container ports equal the --grpc-port/--http-port flags; probes hit /healthz (a real
//     route of server/rest_gateway.cc) on the HTTP port; the database path is on the
//     PersistentVolumeClaim; token files are mounted from the Secrets, and the coordinator
//     and the workers read the same worker token; the worker requests nvidia.com/gpu and
//     dials the coordinator's Service on its gRPC port;
//   - deploy/container/Dockerfile.*: EXPOSE equals the container ports, ENTRYPOINT the
//     manifests' command, USER their runAsUser, the dashboard lands where --dashboard-dir
//     points;
//   - a coordinator that listens beyond loopback (--bind 0.0.0.0) also requires a client
//     token, and the container image's default command binds nothing (loopback) without one;
//   - deploy/systemd/*.service and deploy/slurm/paratune.sbatch: every flag they pass exists
//     in the binary's --help (the binaries in $PARATUNE_BIN_DIR), --db is in the
//     StateDirectory, tokens come from LoadCredential.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

namespace {

namespace fs = std::filesystem;

fs::path SourceDir() {
  const char* dir = std::getenv("PARATUNE_SOURCE_DIR");
  return dir != nullptr ? fs::path(dir) : fs::path(PARATUNE_DEFAULT_SOURCE_DIR);
}
fs::path BinDir() {
  const char* dir = std::getenv("PARATUNE_BIN_DIR");
  return dir != nullptr ? fs::path(dir) : fs::path(PARATUNE_DEFAULT_BIN_DIR);
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Every `--flag` token in `text`.
std::set<std::string> Flags(const std::string& text) {
  static const std::regex kFlag(R"((^|[\s"'(\[,])(--[a-z0-9][a-z0-9-]*))");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kFlag);
       it != std::sregex_iterator(); ++it) {
    out.insert((*it)[2].str());
  }
  return out;
}

/// The flags `binary --help` documents.
std::set<std::string> HelpFlags(const std::string& binary) {
  const fs::path path = BinDir() / binary;
  std::string text;
  FILE* pipe = popen((path.string() + " --help 2>&1").c_str(), "r");
  if (pipe == nullptr) return {};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) text.append(buf, n);
  pclose(pipe);
  return Flags(text);
}

/// The flags in `used` that `binary --help` does not know.
std::set<std::string> UnknownFlags(const std::string& binary, const std::set<std::string>& used) {
  const std::set<std::string> known = HelpFlags(binary);
  std::set<std::string> unknown;
  for (const std::string& f : used) {
    if (!known.contains(f)) unknown.insert(f);
  }
  return unknown;
}

/// `--flag value` pairs of an argument list (a flag followed by another flag has "").
std::map<std::string, std::string> FlagValues(const std::vector<std::string>& args) {
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--", 0) != 0) continue;
    const bool has_value = i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0;
    out[args[i]] = has_value ? args[i + 1] : "";
  }
  return out;
}

std::string Dirname(const std::string& path) { return fs::path(path).parent_path().string(); }
std::string Basename(const std::string& path) { return fs::path(path).filename().string(); }

/// The parsed deploy/k8s/ folder.
class K8sManifestsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = SourceDir() / "deploy" / "k8s";
    ASSERT_TRUE(fs::is_directory(dir_)) << dir_;
    for (const fs::directory_entry& e : fs::directory_iterator(dir_)) {
      if (e.path().extension() != ".yaml") continue;
      const std::string file = e.path().filename().string();
      if (file == "kustomization.yaml") {
        kustomization_ = YAML::LoadFile(e.path().string());
        continue;
      }
      files_.insert(file);
      for (const YAML::Node& doc : YAML::LoadAllFromFile(e.path().string())) {
        if (!doc.IsMap()) continue;
        docs_.push_back(doc);
      }
    }
    ASSERT_TRUE(kustomization_.IsMap()) << "deploy/k8s/kustomization.yaml is missing";
  }

  /// The one object of `kind` (fails the test when there is not exactly one).
  YAML::Node One(const std::string& kind) const {
    std::vector<YAML::Node> found;
    for (const YAML::Node& d : docs_) {
      if (d["kind"].as<std::string>("") == kind) found.push_back(d);
    }
    EXPECT_EQ(found.size(), 1u) << "objects of kind " << kind;
    return found.empty() ? YAML::Node() : found.front();
  }
  YAML::Node Named(const std::string& kind, const std::string& name) const {
    for (const YAML::Node& d : docs_) {
      if (d["kind"].as<std::string>("") == kind && d["metadata"]["name"].as<std::string>("") == name) {
        return d;
      }
    }
    return YAML::Node();
  }
  static YAML::Node Container(const YAML::Node& workload) {
    const YAML::Node containers = workload["spec"]["template"]["spec"]["containers"];
    EXPECT_TRUE(containers.IsSequence() && containers.size() == 1u) << "one container";
    return containers.IsSequence() && containers.size() > 0 ? containers[0] : YAML::Node();
  }
  static std::vector<std::string> Args(const YAML::Node& container) {
    return container["args"].as<std::vector<std::string>>(std::vector<std::string>{});
  }
  /// The container port that `port` (a name or a number) designates; nullopt if none.
  static std::optional<int> ResolvePort(const YAML::Node& container, const YAML::Node& port) {
    for (const YAML::Node& p : container["ports"]) {
      if (p["name"].as<std::string>("") == port.as<std::string>("") ||
          p["containerPort"].as<std::string>("") == port.as<std::string>("")) {
        return p["containerPort"].as<int>();
      }
    }
    return std::nullopt;
  }
  static int NamedPort(const YAML::Node& container, const std::string& name) {
    for (const YAML::Node& p : container["ports"]) {
      if (p["name"].as<std::string>("") == name) return p["containerPort"].as<int>();
    }
    ADD_FAILURE() << "no container port named " << name;
    return -1;
  }
  /// The pod volume mounted exactly at `mount_path`.
  static YAML::Node VolumeAt(const YAML::Node& workload, const YAML::Node& container,
                            const std::string& mount_path) {
    std::string volume;
    for (const YAML::Node& m : container["volumeMounts"]) {
      if (m["mountPath"].as<std::string>("") == mount_path) volume = m["name"].as<std::string>();
    }
    for (const YAML::Node& v : workload["spec"]["template"]["spec"]["volumes"]) {
      if (!volume.empty() && v["name"].as<std::string>("") == volume) return v;
    }
    return YAML::Node();
  }
  /// (Secret name, key) a token-file path reads: the file is <mountPath>/<key> of a secret
  /// volume, and the Secret object has that key.
  std::pair<std::string, std::string> SecretOf(const YAML::Node& workload,
                                               const YAML::Node& container,
                                               const std::string& path) const {
    const YAML::Node volume = VolumeAt(workload, container, Dirname(path));
    EXPECT_TRUE(volume.IsMap()) << path << ": no volume mounted at " << Dirname(path);
    if (!volume.IsMap() || !volume["secret"]) {
      ADD_FAILURE() << path << ": the volume at " << Dirname(path) << " is not a Secret";
      return {};
    }
    const std::string secret = volume["secret"]["secretName"].as<std::string>("");
    const std::string key = Basename(path);
    const YAML::Node object = Named("Secret", secret);
    EXPECT_TRUE(object.IsMap()) << "no Secret " << secret;
    if (object.IsMap()) {
      const auto has_key = [&](const char* field) {
        const YAML::Node values = object[field];
        return values.IsDefined() && values.IsMap() && values[key].IsDefined();
      };
      EXPECT_TRUE(has_key("stringData") || has_key("data"))
          << "Secret " << secret << " has no key " << key << " (read as " << path << ")";
    }
    return {secret, key};
  }

  fs::path dir_;
  YAML::Node kustomization_;
  std::set<std::string> files_;
  std::vector<YAML::Node> docs_;
};

TEST_F(K8sManifestsTest, TheKustomizationListsEveryManifestAndAllLiveInOneNamespace) {
  std::set<std::string> resources;
  for (const YAML::Node& r : kustomization_["resources"]) resources.insert(r.as<std::string>());
  EXPECT_EQ(resources, files_);
  const std::string ns = kustomization_["namespace"].as<std::string>("");
  EXPECT_EQ(ns, "paratune");
  EXPECT_EQ(One("Namespace")["metadata"]["name"].as<std::string>(""), ns);
  // Namespace, 2 Secrets, PVC, Deployment, Service, DaemonSet.
  EXPECT_EQ(docs_.size(), 7u);
  for (const YAML::Node& d : docs_) {
    ASSERT_TRUE(d["apiVersion"] && d["kind"] && d["metadata"]["name"]) << YAML::Dump(d);
    if (d["kind"].as<std::string>() != "Namespace") {
      EXPECT_EQ(d["metadata"]["namespace"].as<std::string>(""), ns)
          << d["kind"] << "/" << d["metadata"]["name"];
    }
  }
}

TEST_F(K8sManifestsTest, TheFlagsExistInTheBinaries) {
  const YAML::Node coordinator = Container(One("Deployment"));
  const YAML::Node worker = Container(One("DaemonSet"));
  std::set<std::string> used;
  for (const std::string& a : Args(coordinator)) used.merge(Flags(a));
  EXPECT_GE(used.size(), 6u);
  EXPECT_EQ(UnknownFlags("paratune-coordinator", used), std::set<std::string>{});
  used.clear();
  for (const std::string& a : Args(worker)) used.merge(Flags(a));
  EXPECT_GE(used.size(), 4u);
  EXPECT_EQ(UnknownFlags("paratune-worker", used), std::set<std::string>{});
}

TEST_F(K8sManifestsTest, TheCheckerCatchesAMisspeltFlag) {
  // The same check on a flag that does not exist (and on a real one): it can fail.
  EXPECT_EQ(UnknownFlags("paratune-coordinator", {"--grpc-prot", "--grpc-port"}),
            std::set<std::string>{"--grpc-prot"});
  EXPECT_EQ(UnknownFlags("paratune-worker", {"--coordinator", "--token"}),
            std::set<std::string>{"--token"});
}

TEST_F(K8sManifestsTest, CoordinatorPortsProbesAndServiceAgree) {
  const YAML::Node deployment = One("Deployment");
  const YAML::Node c = Container(deployment);
  const auto flags = FlagValues(Args(c));
  ASSERT_TRUE(flags.contains("--grpc-port") && flags.contains("--http-port"));
  const int grpc = NamedPort(c, "grpc");
  const int http = NamedPort(c, "http");
  EXPECT_EQ(std::stoi(flags.at("--grpc-port")), grpc);
  EXPECT_EQ(std::stoi(flags.at("--http-port")), http);
  EXPECT_NE(grpc, http);
  // /healthz is a route of the REST gateway, without auth.
  EXPECT_NE(ReadFile(SourceDir() / "server" / "rest_gateway.cc").find("Get(\"/healthz\""),
            std::string::npos);
  for (const char* probe : {"readinessProbe", "livenessProbe"}) {
    SCOPED_TRACE(probe);
    ASSERT_TRUE(c[probe]["httpGet"].IsMap());
    EXPECT_EQ(c[probe]["httpGet"]["path"].as<std::string>(""), "/healthz");
    EXPECT_EQ(ResolvePort(c, c[probe]["httpGet"]["port"]), std::optional<int>(http));
  }
  // The Service selects the pods and forwards to the two container ports.
  const YAML::Node service = One("Service");
  const YAML::Node labels = deployment["spec"]["template"]["metadata"]["labels"];
  ASSERT_GT(service["spec"]["selector"].size(), 0u);
  for (const auto& kv : service["spec"]["selector"]) {
    EXPECT_EQ(labels[kv.first.as<std::string>()].as<std::string>(""), kv.second.as<std::string>());
  }
  for (const auto& kv : deployment["spec"]["selector"]["matchLabels"]) {
    EXPECT_EQ(labels[kv.first.as<std::string>()].as<std::string>(""), kv.second.as<std::string>());
  }
  std::set<int> targets;
  for (const YAML::Node& p : service["spec"]["ports"]) {
    const std::optional<int> target = ResolvePort(c, p["targetPort"]);
    ASSERT_TRUE(target.has_value()) << YAML::Dump(p);
    targets.insert(*target);
  }
  EXPECT_EQ(targets, (std::set<int>{grpc, http}));
}

TEST_F(K8sManifestsTest, TheDatabaseLivesOnThePersistentVolumeClaim) {
  const YAML::Node deployment = One("Deployment");
  const YAML::Node c = Container(deployment);
  const auto flags = FlagValues(Args(c));
  ASSERT_TRUE(flags.contains("--db"));
  const YAML::Node volume = VolumeAt(deployment, c, Dirname(flags.at("--db")));
  ASSERT_TRUE(volume.IsMap()) << "nothing mounted at " << Dirname(flags.at("--db"));
  const YAML::Node pvc = One("PersistentVolumeClaim");
  EXPECT_EQ(volume["persistentVolumeClaim"]["claimName"].as<std::string>(""),
            pvc["metadata"]["name"].as<std::string>());
  EXPECT_EQ(pvc["spec"]["accessModes"][0].as<std::string>(""), "ReadWriteOnce");
  // One writer on a ReadWriteOnce volume: one replica, and the old pod goes first.
  EXPECT_EQ(deployment["spec"]["replicas"].as<int>(0), 1);
  EXPECT_EQ(deployment["spec"]["strategy"]["type"].as<std::string>(""), "Recreate");
}

TEST_F(K8sManifestsTest, TokensComeFromTheSecretsAndWorkersShareTheCoordinatorsWorkerToken) {
  const YAML::Node deployment = One("Deployment");
  const YAML::Node daemonset = One("DaemonSet");
  const auto cf = FlagValues(Args(Container(deployment)));
  const auto wf = FlagValues(Args(Container(daemonset)));
  ASSERT_TRUE(cf.contains("--client-token-file") && cf.contains("--worker-token-file"));
  ASSERT_TRUE(wf.contains("--token-file"));
  const auto client = SecretOf(deployment, Container(deployment), cf.at("--client-token-file"));
  const auto worker = SecretOf(deployment, Container(deployment), cf.at("--worker-token-file"));
  const auto worker_side = SecretOf(daemonset, Container(daemonset), wf.at("--token-file"));
  EXPECT_EQ(worker_side, worker);
  EXPECT_NE(client.first, worker.first) << "separate Secrets: workers never see the client token";
  for (const YAML::Node& v : daemonset["spec"]["template"]["spec"]["volumes"]) {
    if (!v["secret"].IsDefined()) continue;
    EXPECT_NE(v["secret"]["secretName"].as<std::string>(""), client.first)
        << "the workers mount the client token";
  }
}

TEST_F(K8sManifestsTest, WorkersRequestGpusAndDialTheCoordinatorService) {
  const YAML::Node daemonset = One("DaemonSet");
  const YAML::Node w = Container(daemonset);
  EXPECT_GE(w["resources"]["limits"]["nvidia.com/gpu"].as<int>(0), 1);
  const auto flags = FlagValues(Args(w));
  EXPECT_EQ(flags.count("--backend") ? flags.at("--backend") : "", "cuda");
  ASSERT_TRUE(flags.contains("--coordinator"));
  const std::string address = flags.at("--coordinator");
  const size_t colon = address.rfind(':');
  ASSERT_NE(colon, std::string::npos) << address;
  const YAML::Node service = One("Service");
  EXPECT_EQ(address.substr(0, colon), service["metadata"]["name"].as<std::string>());
  int grpc_service_port = -1;
  for (const YAML::Node& p : service["spec"]["ports"]) {
    if (ResolvePort(Container(One("Deployment")), p["targetPort"]) ==
        NamedPort(Container(One("Deployment")), "grpc")) {
      grpc_service_port = p["port"].as<int>();
    }
  }
  EXPECT_EQ(std::stoi(address.substr(colon + 1)), grpc_service_port);
  // Every $(VAR) in the args is defined in the container's env.
  std::set<std::string> env;
  for (const YAML::Node& e : w["env"]) env.insert(e["name"].as<std::string>());
  static const std::regex kRef(R"(\$\(([A-Z_]+)\))");
  int refs = 0;
  for (const std::string& a : Args(w)) {
    for (auto it = std::sregex_iterator(a.begin(), a.end(), kRef); it != std::sregex_iterator();
         ++it, ++refs) {
      EXPECT_TRUE(env.contains((*it)[1].str())) << (*it)[1].str();
    }
  }
  EXPECT_EQ(refs, 1);  // --name $(NODE_NAME)
  for (const YAML::Node& e : w["env"]) {
    if (e["name"].as<std::string>() == "NODE_NAME") {
      EXPECT_EQ(e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(""), "spec.nodeName");
    }
  }
}

/// One Dockerfile's final stage: base image, EXPOSEd ports, ENTRYPOINT[0], USER.
struct Dockerfile {
  std::string final_from;
  std::set<int> exposed;
  std::string entrypoint;
  std::string user;
  std::string text;
};

Dockerfile ParseDockerfile(const fs::path& path) {
  Dockerfile d;
  d.text = ReadFile(path);
  std::istringstream lines(d.text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string op;
    words >> op;
    if (op == "FROM") {
      words >> d.final_from;
      d.exposed.clear();
      d.entrypoint.clear();
      d.user.clear();
    } else if (op == "EXPOSE") {
      for (int port; words >> port;) d.exposed.insert(port);
    } else if (op == "ENTRYPOINT") {
      static const std::regex kFirst(R"re(\[\s*"([^"]+)")re");
      std::smatch m;
      if (std::regex_search(line, m, kFirst)) d.entrypoint = m[1];
    } else if (op == "USER") {
      words >> d.user;
    }
  }
  return d;
}

TEST_F(K8sManifestsTest, TheDockerfilesMatchTheManifests) {
  const fs::path dir = SourceDir() / "deploy" / "container";
  const Dockerfile coordinator = ParseDockerfile(dir / "Dockerfile.coordinator");
  const Dockerfile worker = ParseDockerfile(dir / "Dockerfile.worker");
  const YAML::Node deployment = One("Deployment");
  const YAML::Node daemonset = One("DaemonSet");
  const YAML::Node c = Container(deployment);
  const YAML::Node w = Container(daemonset);

  EXPECT_EQ(coordinator.final_from, "debian:bookworm-slim");
  EXPECT_EQ(worker.final_from.rfind("nvidia/cuda:", 0), 0u) << worker.final_from;
  EXPECT_NE(worker.final_from.find("-runtime-"), std::string::npos) << worker.final_from;
  EXPECT_EQ(coordinator.exposed, (std::set<int>{NamedPort(c, "grpc"), NamedPort(c, "http")}));
  EXPECT_EQ(worker.exposed, std::set<int>{});  // the worker only dials out
  EXPECT_EQ(coordinator.entrypoint, c["command"][0].as<std::string>(""));
  EXPECT_EQ(worker.entrypoint, w["command"][0].as<std::string>(""));
  EXPECT_EQ(coordinator.user,
            deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"].as<std::string>(""));
  EXPECT_EQ(worker.user,
            daemonset["spec"]["template"]["spec"]["securityContext"]["runAsUser"].as<std::string>(""));
  // Images are named after their Dockerfile, and the kustomization can retarget both.
  EXPECT_EQ(c["image"].as<std::string>("").rfind("paratune/coordinator:", 0), 0u);
  EXPECT_EQ(w["image"].as<std::string>("").rfind("paratune/worker:", 0), 0u);
  std::set<std::string> images;
  for (const YAML::Node& i : kustomization_["images"]) images.insert(i["name"].as<std::string>());
  EXPECT_EQ(images, (std::set<std::string>{"paratune/coordinator", "paratune/worker"}));
  // The dashboard is copied where --dashboard-dir points.
  const auto flags = FlagValues(Args(c));
  ASSERT_TRUE(flags.contains("--dashboard-dir"));
  EXPECT_NE(coordinator.text.find("/src/web/dist " + flags.at("--dashboard-dir")),
            std::string::npos);
  // Both build with the project's scripts.
  for (const Dockerfile* d : {&coordinator, &worker}) {
    EXPECT_NE(d->text.find("scripts/install-deps.sh"), std::string::npos);
    EXPECT_NE(d->text.find("scripts/build.sh"), std::string::npos);
  }
}

/// key → values of a systemd unit (keys may repeat).
std::multimap<std::string, std::string> ParseUnit(const fs::path& path) {
  std::multimap<std::string, std::string> out;
  std::istringstream lines(ReadFile(path));
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || line[0] == '[') continue;
    const size_t eq = line.find('=');
    if (eq != std::string::npos) out.emplace(line.substr(0, eq), line.substr(eq + 1));
  }
  return out;
}
std::vector<std::string> Words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

/// The value after `flag` in `args`, or "" when it is absent.
std::string FlagValue(const std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag) return args[i + 1];
  }
  return "";
}

TEST_F(K8sManifestsTest, ACoordinatorOpenBeyondLoopbackRequiresAClientToken) {
  const std::vector<std::string> args = Args(Container(One("Deployment")));
  EXPECT_EQ(FlagValue(args, "--bind"), "0.0.0.0");
  EXPECT_NE(FlagValue(args, "--client-token-file"), "");
  // The image's default command: no --bind and no token, so the coordinator listens on the
  // container's loopback only (the README's docker run passes the tokens).
  const Dockerfile image =
      ParseDockerfile(SourceDir() / "deploy" / "container" / "Dockerfile.coordinator");
  std::string cmd;
  std::istringstream lines(image.text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("CMD ", 0) == 0) cmd = line;
  }
  ASSERT_FALSE(cmd.empty());
  EXPECT_EQ(cmd.find("--bind"), std::string::npos) << cmd;
  EXPECT_EQ(cmd.find("--client-token-file"), std::string::npos) << cmd;
  const std::string readme = ReadFile(SourceDir() / "deploy" / "README.md");
  EXPECT_NE(readme.find("--client-token-file /etc/paratune/client.token"), std::string::npos);
}

TEST(SystemdUnitsTest, FlagsStateDirectoryCredentialsAndDefaults) {
  const fs::path dir = SourceDir() / "deploy" / "systemd";
  std::map<std::string, std::string> worker_token_source;
  for (const auto& [unit, binary] : std::vector<std::pair<std::string, std::string>>{
           {"paratune-coordinator.service", "paratune-coordinator"},
           {"paratune-worker.service", "paratune-worker"}}) {
    SCOPED_TRACE(unit);
    const auto keys = ParseUnit(dir / unit);
    ASSERT_EQ(keys.count("ExecStart"), 1u);
    const std::vector<std::string> exec = Words(keys.find("ExecStart")->second);
    EXPECT_EQ(exec.at(0), "/usr/local/bin/" + binary);
    EXPECT_EQ(UnknownFlags(binary, Flags(keys.find("ExecStart")->second)), std::set<std::string>{});
    EXPECT_EQ(keys.find("Restart")->second, "on-failure");
    EXPECT_EQ(keys.find("User")->second, "paratune");
    // Every ${VAR}/$VAR the command uses has a default (Environment=) or comes from systemd.
    std::set<std::string> defined = {"CREDENTIALS_DIRECTORY"};
    for (auto [it, end] = keys.equal_range("Environment"); it != end; ++it) {
      defined.insert(it->second.substr(0, it->second.find('=')));
    }
    static const std::regex kVar(R"(\$\{?([A-Z_]+)\}?)");
    const std::string& cmd = keys.find("ExecStart")->second;
    for (auto it = std::sregex_iterator(cmd.begin(), cmd.end(), kVar); it != std::sregex_iterator();
         ++it) {
      EXPECT_TRUE(defined.contains((*it)[1].str())) << (*it)[1].str() << " has no default";
    }
    // ${CREDENTIALS_DIRECTORY}/ID needs LoadCredential=ID:SOURCE.
    std::map<std::string, std::string> credentials;
    for (auto [it, end] = keys.equal_range("LoadCredential"); it != end; ++it) {
      const size_t colon = it->second.find(':');
      credentials[it->second.substr(0, colon)] = it->second.substr(colon + 1);
    }
    const auto flags = FlagValues(exec);
    for (const auto& [flag, value] : flags) {
      static const std::string kPrefix = "${CREDENTIALS_DIRECTORY}/";
      if (value.rfind(kPrefix, 0) != 0) continue;
      const std::string id = value.substr(kPrefix.size());
      EXPECT_TRUE(credentials.contains(id)) << flag << " reads credential " << id;
      if (flag == "--worker-token-file" || flag == "--token-file") {
        worker_token_source[unit] = credentials[id];
      }
    }
    if (binary == "paratune-coordinator") {
      ASSERT_TRUE(flags.contains("--db"));
      EXPECT_EQ(flags.at("--db"), "%S/" + keys.find("StateDirectory")->second + "/paratune.db");
    }
  }
  // Both units read the same worker token file.
  ASSERT_EQ(worker_token_source.size(), 2u);
  EXPECT_EQ(worker_token_source["paratune-coordinator.service"],
            worker_token_source["paratune-worker.service"]);
  EXPECT_NE(ReadFile(dir / "paratune.sysusers.conf").find("u paratune "), std::string::npos);
}

TEST(SlurmScriptTest, TheFlagsItPassesExist) {
  const std::string script = ReadFile(SourceDir() / "deploy" / "slurm" / "paratune.sbatch");
  ASSERT_FALSE(script.empty());
  // The lines that build each binary's argument array.
  std::set<std::string> coordinator, worker;
  std::istringstream lines(script);
  std::string current;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("#", 0) == 0) continue;
    if (line.find("coordinator_args=(") != std::string::npos ||
        line.find("coordinator_args+=(") != std::string::npos) {
      current = "coordinator";
    } else if (line.find("worker_args=(") != std::string::npos ||
               line.find("worker_args+=(") != std::string::npos ||
               line.find("\"$worker_bin\"") != std::string::npos) {
      current = "worker";
    }
    if (current == "coordinator") coordinator.merge(Flags(line));
    if (current == "worker") worker.merge(Flags(line));
    if (line.find(')') != std::string::npos || line.find("\"$worker_bin\"") != std::string::npos) {
      current.clear();
    }
  }
  EXPECT_GE(coordinator.size(), 7u);  // bind, ports, db, port file, two token files
  EXPECT_GE(worker.size(), 4u);       // backend, token file, devices, coordinator
  EXPECT_EQ(UnknownFlags("paratune-coordinator", coordinator), std::set<std::string>{});
  EXPECT_EQ(UnknownFlags("paratune-worker", worker), std::set<std::string>{});
}

}  // namespace
