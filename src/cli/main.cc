// tessera: one binary, many subcommands (see `tessera --help`).
#include <algorithm>
#include <cstdio>
#include <exception>

#include "cli/command.h"
#include "core/error.h"
#include "dist/world.h"

namespace tessera::cli {

std::vector<Command>& command_registry() {
  static std::vector<Command> registry;
  return registry;
}

}  // namespace tessera::cli

int main(int argc, char** argv) {
  using namespace tessera;
  dist::World world(&argc, &argv);  // the ranks mpirun started, or this process alone
  // One rank that fails ends them all (the others may be waiting for it).
  auto failed = [&world](int code) { return world.distributed() ? world.abort(code), code : code; };
  CLI::App app{"Tessera: an LLM inference engine and server"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");
  auto& registry = cli::command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const cli::Command& a, const cli::Command& b) { return a.name < b.name; });
  std::vector<std::pair<CLI::App*, std::function<int()>>> commands;
  for (const cli::Command& c : registry) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    commands.emplace_back(sub, c.setup(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : commands) {
      if (sub->parsed()) return run();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return failed(1);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return failed(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return failed(1);
  }
  return 0;
}
