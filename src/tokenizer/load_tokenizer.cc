// tokenizer/load_tokenizer.cc — picking the loader for a tokenizer path.
#include <filesystem>
#include <memory>
#include <string>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

Expected<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) {
    if (!fs::is_regular_file(p / "tokenizer.json", ec)) {
      return make_error("tokenizer directory '{}' has no tokenizer.json", path);
    }
    return load_hf_tokenizer(path);
  }
  if (!fs::is_regular_file(p, ec)) return make_error("tokenizer path '{}' does not exist", path);
  if (p.filename() == "tokenizer.json") return load_hf_tokenizer(p.parent_path().string());
  if (p.extension() == ".gguf") {
    // The tokenizer copies what it needs, so the file can be unmapped once it is built.
    KASSIGN(const std::unique_ptr<GgufFile> gguf, GgufFile::open(path));
    return load_gguf_tokenizer(*gguf);
  }
  return make_error(
      "cannot tell what tokenizer '{}' is: give a directory with tokenizer.json, a "
      "tokenizer.json file or a .gguf file",
      path);
}

}  // namespace kestrel
