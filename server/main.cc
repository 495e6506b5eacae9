// paratune-coordinator: the ParaTune service (issue: coordinator service).
#include <iostream>

#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  CLI::App app{"paratune-coordinator: plans, profiles and ranks parallel layouts"};
  CLI11_PARSE(app, argc, argv);
  std::cerr << "UNIMPLEMENTED: paratune-coordinator is not built yet; see README.md\n";
  return 1;
}
