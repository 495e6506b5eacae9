// submit, watch, results, cancel, workers, tune: talk to a coordinator, or run one
// embedded (issue: coordinator service).
#include <iostream>

#include "client/commands.h"

namespace paratune::client {

void RegisterServiceCommands(CLI::App& app, int* exit_code) {
  auto unimplemented = [exit_code](const char* what) {
    return [exit_code, what] {
      std::cerr << "UNIMPLEMENTED: `paratune " << what
                << "` needs the coordinator, which is not built yet\n";
      *exit_code = 1;
    };
  };
  app.add_subcommand("tune", "Plan, profile on a local worker and rank, in one process")
      ->callback(unimplemented("tune"));
  app.add_subcommand("submit", "Submit a job spec to a coordinator")
      ->callback(unimplemented("submit"));
  app.add_subcommand("watch", "Follow a job's progress until it ends")
      ->callback(unimplemented("watch"));
  app.add_subcommand("results", "Show a job's ranked layouts")
      ->callback(unimplemented("results"));
  app.add_subcommand("cancel", "Cancel a job")->callback(unimplemented("cancel"));
  app.add_subcommand("workers", "List the workers registered with a coordinator")
      ->callback(unimplemented("workers"));
}

}  // namespace paratune::client
