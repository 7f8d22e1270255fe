// cli/commands.h — the kestrel subcommands; each takes (argc, argv) starting at its own name.
#pragma once

namespace kestrel::cli {

const char* version();
int run_generate(int argc, char** argv);

}  // namespace kestrel::cli
