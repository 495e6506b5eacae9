// plan, estimate, export: the offline analytical planner (issue: analytical planner).
#include <iostream>

#include "client/commands.h"

namespace paratune::client {

void RegisterPlanCommands(CLI::App& app, int* exit_code) {
  auto unimplemented = [exit_code](const char* what) {
    return [exit_code, what] {
      std::cerr << "UNIMPLEMENTED: `paratune " << what
                << "` needs the analytical planner, which is not built yet\n";
      *exit_code = 1;
    };
  };
  app.add_subcommand("plan", "Rank every valid parallel layout for a spec (analytical model)")
      ->callback(unimplemented("plan"));
  app.add_subcommand("estimate", "Predict time and memory of one fully pinned layout")
      ->callback(unimplemented("estimate"));
  app.add_subcommand("export", "Export a layout as Megatron-LM arguments or a NeMo config")
      ->callback(unimplemented("export"));
}

}  // namespace paratune::client
