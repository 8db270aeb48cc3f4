// Subcommand registry. Each cli/cmd_*.cc registers itself with
// TESSERA_COMMAND; main() builds the CLI11 app from the registry, so adding a
// subcommand touches one file. Commands parse arguments and call the library;
// they hold no logic of their own.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace tessera::cli {

// Registers options on `sub` and returns the function that runs the command
// (after parsing) and yields the process exit code.
using CommandSetup = std::function<std::function<int()>(CLI::App& sub)>;

struct Command {
  std::string name;
  std::string help;
  CommandSetup setup;
};

std::vector<Command>& command_registry();

struct CommandRegistrar {
  explicit CommandRegistrar(Command c) { command_registry().push_back(std::move(c)); }
};

}  // namespace tessera::cli

#define TESSERA_CONCAT_INNER(a, b) a##b
#define TESSERA_CONCAT(a, b) TESSERA_CONCAT_INNER(a, b)
// The setup lambda is variadic so commas inside it need no parentheses.
// __COUNTER__, not __LINE__: unity builds put several commands in one
// translation unit, where two could sit on the same line of their files.
#define TESSERA_COMMAND(name, help, ...)                                                    \
  static const ::tessera::cli::CommandRegistrar TESSERA_CONCAT(tessera_command_, __COUNTER__)( \
      ::tessera::cli::Command{name, help, __VA_ARGS__})
