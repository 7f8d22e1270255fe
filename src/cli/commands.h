// cli/commands.h — the kestrel subcommands. Each command's file registers itself at start-up
// (KESTREL_COMMAND below), so adding a command touches no shared file.
#pragma once

#include <functional>
#include <map>
#include <string>

namespace kestrel::cli {

const char* version();

struct Command {
  std::string summary;
  // argc/argv start at the command's own name.
  std::function<int(int, char**)> run;
};

// Name → command, sorted for the help listing. A two-word name ("bench latency") is a
// subcommand; its argv starts at the second word.
std::map<std::string, Command>& commands();
bool register_command(const std::string& name, Command command);

}  // namespace kestrel::cli

#define KESTREL_COMMAND(name, summary, fn)                             \
  [[maybe_unused]] static const bool kestrel_command_registered_##fn = \
      ::kestrel::cli::register_command(name, ::kestrel::cli::Command{summary, fn})
