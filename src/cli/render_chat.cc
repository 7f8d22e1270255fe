// kestrel render-chat — renders a chat template over JSON contexts, one per stdin line, so
// the engine can be compared line by line with Python jinja2.
//   in:  {"context": {"messages": [...], "add_generation_prompt": true, ...}}
//   out: {"rendered": "..."} or {"error": "..."}
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/template_source.h"
#include "cli/commands.h"

namespace kestrel::cli {

namespace {

int run_render_chat(int argc, char** argv) {
  std::string template_path, model_path;
  CLI::App app{"Render a chat template over JSON-lines contexts read from stdin.",
               "kestrel render-chat"};
  auto* t = app.add_option("--template,--chat-template", template_path,
                           "chat template: a file, or the template text");
  auto* m = app.add_option("--model", model_path,
                           "take the model's template (directory or .gguf), as serve would");
  t->excludes(m);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (template_path.empty() && model_path.empty()) {
    std::fprintf(stderr, "error: give --template or --model\n");
    return 2;
  }
  auto source = chat::find_chat_template(model_path, template_path);
  if (!source.ok()) {
    std::fprintf(stderr, "error: %s\n", source.error().message.c_str());
    return 1;
  }
  auto tmpl = chat::ChatTemplate::parse(*source);
  if (!tmpl.ok()) {
    std::fprintf(stderr, "error: %s: %s\n",
                 template_path.empty() ? model_path.c_str() : template_path.c_str(),
                 tmpl.error().message.c_str());
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::ordered_json out;
    // Key order matters (tojson and repr print dicts in insertion order): ordered_json.
    const auto in = nlohmann::ordered_json::parse(line, nullptr, false);
    if (in.is_discarded() || !in.is_object() || !in.contains("context")) {
      out["error"] = "input line is not a JSON object with a \"context\" key";
    } else {
      auto r = tmpl->render(in["context"]);
      if (r.ok()) {
        out["rendered"] = *r;
      } else {
        out["error"] = r.error().message;
      }
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  }
  return 0;
}

KESTREL_COMMAND("render-chat", "render a chat template over JSON-lines contexts from stdin",
                run_render_chat);

}  // namespace

}  // namespace kestrel::cli
