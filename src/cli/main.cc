// kestrel — command-line entry point: dispatches to subcommands.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::printf(
        "usage: kestrel <command> [options]\n\n"
        "commands:\n"
        "  generate   run a prompt through a model and print the continuation\n"
        "  version    print the version\n\n"
        "Run 'kestrel <command> --help' for the options of a command.\n");
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "generate") return kestrel::cli::run_generate(argc - 1, argv + 1);
  if (cmd == "version" || cmd == "--version") {
    std::printf("kestrel %s\n", kestrel::cli::version());
    return 0;
  }
  std::fprintf(stderr, "kestrel: unknown command '%s' (try 'kestrel --help')\n", cmd.c_str());
  return 2;
}
