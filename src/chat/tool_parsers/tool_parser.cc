// The driver shared by every tool-call format: runs a format's decisions over buffered text,
// hands out call ids and indices, and turns the decisions into message parts or stream deltas.
#include "chat/tool_parsers/tool_parser.h"

#include <functional>
#include <map>
#include <random>

#include "chat/tool_parsers/format.h"

namespace kestrel::chat {
namespace {

std::string new_call_id() {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(rng)];
  return id;
}

// Streaming state of one message: the text not yet decided and the calls announced so far.
class Driver {
 public:
  explicit Driver(std::unique_ptr<CallFormat> format) : format_(std::move(format)) {}

  ToolStreamDelta run(std::string_view text, bool eof) {
    buffer_.append(text);
    ToolStreamDelta out;
    size_t pos = 0;
    while (pos < buffer_.size()) {
      const std::string_view rest = std::string_view(buffer_).substr(pos);
      Step step = format_->next(rest, eof);
      // A format must decide everything at the end; a zero-length step would never finish.
      if ((step.kind == StepKind::kNeedMore && eof) ||
          (step.kind != StepKind::kNeedMore && step.length == 0)) {
        step = content_step(rest.size());
      }
      if (step.kind == StepKind::kNeedMore) {
        announce(step.names, out);
        break;
      }
      if (step.kind == StepKind::kContent) {
        out.content.append(rest.substr(0, step.length));
        announced_.clear();
      } else if (step.kind == StepKind::kCalls) {
        emit_calls(step.calls, out);
      }
      pos += step.length;
    }
    buffer_.erase(0, pos);
    return out;
  }

 private:
  // Early id+name deltas for calls whose names are known before their arguments are complete.
  void announce(const std::vector<std::string>& names, ToolStreamDelta& out) {
    for (size_t i = announced_.size(); i < names.size(); ++i) {
      const int index = next_index_++;
      announced_.push_back(index);
      out.tool_calls.push_back({index, new_call_id(), names[i], ""});
    }
  }

  void emit_calls(const std::vector<RawCall>& calls, ToolStreamDelta& out) {
    for (size_t i = 0; i < calls.size(); ++i) {
      if (i < announced_.size()) {
        out.tool_calls.push_back({announced_[i], std::nullopt, std::nullopt, calls[i].arguments});
      } else {
        out.tool_calls.push_back({next_index_++, new_call_id(), calls[i].name, calls[i].arguments});
      }
    }
    announced_.clear();
  }

  std::unique_ptr<CallFormat> format_;
  std::string buffer_;
  std::vector<int> announced_;  // indices of announced calls still waiting for their arguments
  int next_index_ = 0;
};

using FormatFactory = std::function<std::unique_ptr<CallFormat>(ToolSetPtr)>;

const std::map<std::string, FormatFactory, std::less<>>& formats() {
  static const std::map<std::string, FormatFactory, std::less<>> kFormats = {
      {"deepseek_v3", make_deepseek_v3_format},
      {"deepseek_v31", make_deepseek_v31_format},
      {"deepseek_v32", make_deepseek_v32_format},
      {"deepseek_v4", make_deepseek_v4_format},
      {"hermes", make_hermes_format},
      {"llama3_json", make_llama3_json_format},
      {"mistral", make_mistral_format},
      {"qwen3_coder", make_qwen3_coder_format},
  };
  return kFormats;
}

class FormatToolParser : public ToolParser {
 public:
  FormatToolParser(FormatFactory factory, ToolSetPtr tools)
      : factory_(std::move(factory)), tools_(std::move(tools)), stream_(factory_(tools_)) {}

  ParsedMessage parse(std::string_view text) override {
    Driver driver(factory_(tools_));
    ToolStreamDelta all = driver.run(text, /*eof=*/true);
    ParsedMessage message{std::move(all.content), {}};
    // With eof from the start nothing is announced early: one delta per call.
    for (ToolCallDelta& d : all.tool_calls) {
      message.tool_calls.push_back({*d.id, *d.name, std::move(d.arguments)});
    }
    return message;
  }

  ToolStreamDelta feed(std::string_view delta) override { return stream_.run(delta, false); }
  ToolStreamDelta finish() override { return stream_.run({}, true); }

 private:
  FormatFactory factory_;
  ToolSetPtr tools_;
  Driver stream_;
};

}  // namespace

ToolStreamDelta feed_tool_calls(ToolParser& parser, std::string_view delta, bool last) {
  ToolStreamDelta d = parser.feed(delta);
  if (last) {
    ToolStreamDelta rest = parser.finish();
    d.content += rest.content;
    d.tool_calls.insert(d.tool_calls.end(), rest.tool_calls.begin(), rest.tool_calls.end());
  }
  return d;
}

std::unique_ptr<ToolParser> make_tool_parser(std::string_view name, std::vector<ToolSpec> tools) {
  const auto it = formats().find(name);
  if (it == formats().end()) return nullptr;
  auto set = std::make_shared<const ToolSet>(ToolSet{std::move(tools)});
  return std::make_unique<FormatToolParser>(it->second, std::move(set));
}

const std::vector<std::string>& tool_parser_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const auto& [name, factory] : formats()) names.push_back(name);
    return names;
  }();
  return kNames;
}

}  // namespace kestrel::chat
