// paratune-worker: runs profiling tasks leased from the coordinator (issue: worker daemon).
#include <iostream>

#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  CLI::App app{"paratune-worker: runs ParaTune profiling tasks on this node's devices"};
  std::string coordinator;
  app.add_option("--coordinator", coordinator, "Coordinator address HOST:PORT")->required();
  CLI11_PARSE(app, argc, argv);
  std::cerr << "UNIMPLEMENTED: paratune-worker is not built yet; see README.md\n";
  return 1;
}
