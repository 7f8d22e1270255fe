// tests/cli/run_kestrel.h — runs the real kestrel binary with arguments and optional stdin,
// capturing exit code, stdout and stderr. Temporary files are unique per call, so tests may run
// in parallel processes.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "base/mmap_file.h"
#include "test_paths.h"

namespace kestrel::test {

struct CliRun {
  int code = -1;
  std::string out, err;
};

inline CliRun run_kestrel(const std::string& args,
                          const std::optional<std::string>& input = std::nullopt) {
  static std::atomic<int> counter{0};
  const auto tmp = std::filesystem::temp_directory_path();
  const std::string stem =
      "kestrel_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1));
  const std::string err_file = tmp / (stem + ".err");
  std::string cmd = kestrel_binary() + " " + args;
  std::string in_file;
  if (input) {
    in_file = tmp / (stem + ".in");
    std::ofstream(in_file, std::ios::binary) << *input;
    cmd += " <" + in_file;
  }
  cmd += " 2>" + err_file;
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p) {
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    const int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  if (auto e = read_text_file(err_file); e.ok()) r.err = *e;
  std::filesystem::remove(err_file);
  if (!in_file.empty()) std::filesystem::remove(in_file);
  return r;
}

}  // namespace kestrel::test
