// kestrel — command-line entry point: dispatches to the registered subcommands.
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "cli/engine_args.h"

namespace kestrel::cli {

const char* version() {
  return "0.1.0";
}

std::map<std::string, Command>& commands() {
  static std::map<std::string, Command> table;
  return table;
}

bool register_command(const std::string& name, Command command) {
  return commands().emplace(name, std::move(command)).second;
}

}  // namespace kestrel::cli

int main(int argc, char** argv) {
  using kestrel::cli::commands;
  // A peer that closes its end (a Gloo pair of a dead rank, a client, a KV transfer) must come
  // back as a write error on that socket, not end the process.
  signal(SIGPIPE, SIG_IGN);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::printf("usage: kestrel <command> [options]\n\ncommands:\n");
    for (const auto& [name, cmd] : commands())
      std::printf("  %-18s %s\n", name.c_str(), cmd.summary.c_str());
    std::printf("  %-18s %s\n\nRun 'kestrel <command> --help' for the options of a command.\n",
                "version", "print the version");
    return argc < 2 ? 2 : 0;
  }
  if (kestrel::Status st = kestrel::cli::apply_cpu_environment(); !st.ok()) {
    std::fprintf(stderr, "kestrel: %s\n", st.message().c_str());
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "version" || cmd == "--version") {
    std::printf("kestrel %s\n", kestrel::cli::version());
    return 0;
  }
  // Two-word commands ("bench latency") take the argument vector from their second word.
  if (argc >= 3) {
    const auto two = commands().find(cmd + " " + argv[2]);
    if (two != commands().end()) return two->second.run(argc - 2, argv + 2);
  }
  auto it = commands().find(cmd);
  if (it == commands().end()) {
    std::string subcommands;
    for (const auto& [name, c] : commands())
      if (name.rfind(cmd + " ", 0) == 0) subcommands += "\n  kestrel " + name;
    if (!subcommands.empty()) {
      std::fprintf(stderr, "kestrel %s: give a subcommand:%s\n", cmd.c_str(), subcommands.c_str());
    } else {
      std::fprintf(stderr, "kestrel: unknown command '%s' (try 'kestrel --help')\n", cmd.c_str());
    }
    return 2;
  }
  return it->second.run(argc - 1, argv + 1);
}
