// paratune: the ParaTune command-line interface.
#include <CLI/CLI.hpp>

#include "client/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "paratune: finds the fastest parallel layout (TP, PP, DP, CP, VP, micro-batch,\n"
      "recompute, optimizer sharding) for training a transformer on a GPU cluster."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "paratune 0.1.0");
  int exit_code = 0;
  paratune::client::RegisterPlanCommands(app, &exit_code);
  paratune::client::RegisterServiceCommands(app, &exit_code);
  // --top N and --rank N count ranked layouts: 1 to search.top_k's bound. A transform runs
  // before the command's own checks (CLI::PositiveNumber's message prints DBL_MAX, 309
  // digits).
  for (CLI::App* command : app.get_subcommands({})) {
    for (const char* name : {"--top", "--rank"}) {
      if (CLI::Option* count = command->get_option_no_throw(name)) {
        count->transform(CLI::Range(int64_t{1}, int64_t{100000}));
      }
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    // CLI11 reports --help/--version as "errors" with code 0; usage errors exit 2.
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}
