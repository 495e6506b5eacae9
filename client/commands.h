// Subcommand groups of the `paratune` CLI. Each Register* adds its subcommands to the app
// and arranges for their callbacks to set `*exit_code` (0 ok, 1 failure, 2 usage/invalid).
#ifndef PARATUNE_CLIENT_COMMANDS_H_
#define PARATUNE_CLIENT_COMMANDS_H_

#include <CLI/CLI.hpp>

namespace paratune::client {

/// Offline commands on the analytical planner: plan, estimate, export.
void RegisterPlanCommands(CLI::App& app, int* exit_code);

/// Commands that talk to a coordinator, and the embedded `tune`: submit, watch, results,
/// cancel, workers, tune.
void RegisterServiceCommands(CLI::App& app, int* exit_code);

}  // namespace paratune::client

#endif  // PARATUNE_CLIENT_COMMANDS_H_
