#include "cli/serve_args.h"

#include <nlohmann/json.hpp>

#include "formats/json_flag.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/ranges.h>

#include "chat/deepseek_encoding.h"
#include "chat/reasoning_parser.h"
#include "chat/tool_parsers/tool_parser.h"
#include "kvx/kv_transfer_config.h"
#include "spec_decode/speculative_config.h"

namespace kestrel::cli {

namespace {

using json = nlohmann::json;

bool contains(std::span<const std::string_view> list, std::string_view s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// What finalize_serve_args() found, in the order of docs/compatibility.md.
struct Findings {
  std::vector<std::string> refusals;
  std::vector<std::string>& notes;
  std::vector<std::string>& warnings;

  void refuse(std::string s) { refusals.push_back(std::move(s)); }
  void note(std::string s) { notes.push_back(std::move(s)); }
  void warn(std::string s) { warnings.push_back(std::move(s)); }
};

// vLLM reads --max-model-len as a human-readable count: lower-case k/m/g/t are powers of 1000
// (decimals allowed, 25.6k), upper-case K/M/G/T powers of 1024 (whole numbers only). Anything
// else, or a count too big for int64, is returned unchanged for CLI11's conversion to refuse.
std::string expand_human_count(std::string s) {
  if (s.size() < 2) return s;
  const size_t decimal = std::string_view("kmgt").find(s.back());
  const size_t binary = std::string_view("KMGT").find(s.back());
  if (decimal == std::string_view::npos && binary == std::string_view::npos) return s;
  const std::string num = s.substr(0, s.size() - 1);
  const size_t dot = num.find('.');
  const std::string whole = num.substr(0, dot);
  std::string frac = dot == std::string::npos ? "" : num.substr(dot + 1);
  const auto digits = [](const std::string& d) {
    return std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!digits(whole) || !digits(frac) || whole.size() + frac.size() == 0) return s;
  if (binary != std::string_view::npos) {
    const int shift = 10 * static_cast<int>(binary + 1);
    if (dot != std::string::npos || whole.size() > 9) return s;
    const int64_t n = std::stoll(whole);
    if (n >= (int64_t{1} << (62 - shift))) return s;
    return std::to_string(n << shift);
  }
  const size_t zeros = 3 * (decimal + 1);
  if (frac.size() > zeros) {
    if (frac.find_first_not_of('0', zeros) != std::string::npos) return s;  // not a whole count
    frac.resize(zeros);
  }
  std::string count = whole + frac + std::string(zeros - frac.size(), '0');
  count.erase(0, std::min(count.find_first_not_of('0'), count.size() - 1));
  return count.size() <= 18 ? count : s;
}

// A boolean flag with its argparse BooleanOptionalAction negation, --no-NAME.
void add_bool(CLI::App& app, const std::string& name, bool& value, const std::string& help) {
  app.add_flag("--" + name + ",!--no-" + name, value, help);
}

// ---- JSON flags ----

enum class JsonType {
  kBool,
  kNonNegInt,
  kPositiveInt,
  kPositiveNumber,
  kString,
  kStringOrInt,
  kObject
};

// One known key of a JSON flag; `children` are the known keys of a nested object.
struct JsonKey {
  std::string_view name;
  JsonType type;
  std::span<const JsonKey> children = {};
};

constexpr JsonKey kPdLayoutKeys[] = {{"dp_size", JsonType::kPositiveInt},
                                     {"tp_size", JsonType::kPositiveInt}};
constexpr JsonKey kKvConnectorExtraKeys[] = {{"prefill", JsonType::kObject, kPdLayoutKeys},
                                             {"decode", JsonType::kObject, kPdLayoutKeys},
                                             {"ascend_local_comm_res_path", JsonType::kString},
                                             {"kv_lease_duration", JsonType::kPositiveNumber},
                                             {"kv_load_timeout", JsonType::kPositiveNumber},
                                             {"kv_transport", JsonType::kString}};
constexpr JsonKey kKvTransferKeys[] = {
    {"kv_connector", JsonType::kString},
    {"kv_role", JsonType::kString},
    {"kv_port", JsonType::kStringOrInt},
    {"engine_id", JsonType::kStringOrInt},
    {"kv_buffer_device", JsonType::kString},
    {"kv_load_failure_policy", JsonType::kString},
    {"kv_connector_module_path", JsonType::kString},
    {"kv_connector_extra_config", JsonType::kObject, kKvConnectorExtraKeys}};
constexpr JsonKey kSchedulerConfigKeys[] = {{"recompute_scheduler_enable", JsonType::kBool}};
constexpr JsonKey kAscendCompilationKeys[] = {{"enable_npugraph_ex", JsonType::kBool},
                                              {"enable_static_kernel", JsonType::kBool}};
constexpr JsonKey kFinegrainedTpKeys[] = {{"lmhead_tensor_parallel_size", JsonType::kPositiveInt}};
constexpr JsonKey kAdditionalKeys[] = {
    {"recompute_scheduler_enable", JsonType::kBool},
    {"scheduler_config", JsonType::kObject, kSchedulerConfigKeys},
    {"ascend_compilation_config", JsonType::kObject, kAscendCompilationKeys},
    {"enable_cpu_binding", JsonType::kBool},
    {"enable_fused_mc2", JsonType::kNonNegInt},
    {"enable_prefill_mc2", JsonType::kBool},
    {"enable_flashcomm1", JsonType::kBool},
    {"enable_dsa_cp", JsonType::kBool},
    {"enable_shared_expert_dp", JsonType::kBool},
    {"multistream_overlap_shared_expert", JsonType::kBool},
    {"finegrained_tp_config", JsonType::kObject, kFinegrainedTpKeys},
    {"weight_nz_mode", JsonType::kNonNegInt}};
constexpr JsonKey kLoaderExtraKeys[] = {{"enable_multithread_load", JsonType::kBool},
                                        {"num_threads", JsonType::kPositiveInt}};
constexpr JsonKey kEngramKeys[] = {{"cpu_offload", JsonType::kBool},
                                   {"dp_shared_memory", JsonType::kBool}};
constexpr JsonKey kModalityKeys[] = {{"image", JsonType::kNonNegInt},
                                     {"video", JsonType::kNonNegInt},
                                     {"audio", JsonType::kNonNegInt}};

bool has_type(const json& v, JsonType t) {
  switch (t) {
    case JsonType::kBool:
      return v.is_boolean();
    case JsonType::kNonNegInt:
      return v.is_number_unsigned();
    case JsonType::kPositiveInt:
      return v.is_number_unsigned() && v.get<uint64_t>() > 0;
    case JsonType::kPositiveNumber:
      return v.is_number() && v.get<double>() > 0;
    case JsonType::kString:
      return v.is_string();
    case JsonType::kStringOrInt:
      return v.is_string() || v.is_number_integer();
    case JsonType::kObject:
      return v.is_object();
  }
  return false;
}

const char* type_phrase(JsonType t) {
  switch (t) {
    case JsonType::kBool:
      return "true or false";
    case JsonType::kNonNegInt:
      return "a non-negative integer";
    case JsonType::kPositiveInt:
      return "a positive integer";
    case JsonType::kPositiveNumber:
      return "a number above 0";
    case JsonType::kString:
      return "a string";
    case JsonType::kStringOrInt:
      return "a string or an integer";
    case JsonType::kObject:
      return "a JSON object";
  }
  return "";
}

// vLLM without a platform plugin ignores --additional-config, so unknown keys there only warn.
enum class UnknownKeys { kRefuse, kWarn };

// Checks `obj`'s keys (dotted `prefix` for nested objects) against `keys`; returns false when
// something was refused.
bool check_keys(const json& obj, std::span<const JsonKey> keys, std::string_view flag,
                const std::string& prefix, UnknownKeys unknown, Findings& f) {
  bool ok = true;
  for (const auto& [name, value] : obj.items()) {
    const std::string path = prefix + name;
    const auto key = std::find_if(keys.begin(), keys.end(),
                                  [&name](const JsonKey& k) { return k.name == name; });
    if (key == keys.end()) {
      if (unknown == UnknownKeys::kWarn) {
        f.warn(fmt::format("{}: ignoring unknown key '{}'", flag, path));
      } else {
        f.refuse(fmt::format("{}: unknown key '{}'", flag, path));
        ok = false;
      }
    } else if (!has_type(value, key->type)) {
      f.refuse(fmt::format("{}: '{}' must be {}", flag, path, type_phrase(key->type)));
      ok = false;
    } else if (key->type == JsonType::kObject) {
      ok = check_keys(value, key->children, flag, path + ".", unknown, f) && ok;
    }
  }
  return ok;
}

// The value of a JSON flag as an object; nullopt when the flag is absent or refused.
std::optional<json> parse_object(std::string_view flag, const std::string& text, Findings& f) {
  if (text.empty()) return std::nullopt;
  Expected<json> j = parse_json_flag(flag, text);
  if (!j.ok()) {
    f.refuse(j.error().message);
    return std::nullopt;
  }
  return std::move(*j);
}

// Parses and checks a JSON flag whose keys are all known; nullopt when absent or refused.
std::optional<json> checked_object(std::string_view flag, const std::string& text,
                                   std::span<const JsonKey> keys, Findings& f) {
  auto j = parse_object(flag, text, f);
  if (j && !check_keys(*j, keys, flag, "", UnknownKeys::kRefuse, f)) return std::nullopt;
  return j;
}

// ---- dispositions, one function per section of docs/compatibility.md ----

// "org/name" with no local file behind it: what vLLM would download from a hub.
bool looks_like_hub_id(const std::string& m) {
  if (m.empty() || m.front() == '/' || m.front() == '.' || m.front() == '~') return false;
  const size_t slash = m.find('/');
  return slash != std::string::npos && slash > 0 && slash + 1 < m.size() &&
         m.find('/', slash + 1) == std::string::npos;
}

// Where scripts/fetch-default-model.sh puts SmolLM2-135M-Instruct; empty when it is not there.
std::string default_model_path() {
  std::string dir;
  if (const char* m = std::getenv("KESTREL_MODELS")) {
    dir = m;
  } else if (const char* h = std::getenv("HOME")) {
    dir = std::string(h) + "/.cache/kestrel/models";
  }
  const std::string path = dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::error_code ec;
  return !dir.empty() && std::filesystem::exists(path, ec) ? path : std::string();
}

void check_model(ServeArgs& a, Findings& f) {
  std::string& model = a.engine.model;
  if (!a.model_option.empty()) {
    if (!model.empty() && model != a.model_option) {
      f.refuse(fmt::format("MODEL '{}' and --model '{}' differ; give the model once", model,
                           a.model_option));
      return;
    }
    model = a.model_option;
  }
  if (model.empty()) model = default_model_path();
  if (model.empty()) {
    f.refuse(
        "the following arguments are required: MODEL (or fetch the default model with "
        "scripts/fetch-default-model.sh)");
    return;
  }
  if (a.served_model_names.empty()) a.served_model_names.push_back(model);
  std::error_code ec;
  if (std::filesystem::exists(model, ec)) return;
  if (looks_like_hub_id(model)) {
    f.refuse(fmt::format(
        "model '{}': no such file or directory (Kestrel does not download models; download the "
        "checkpoint and pass its path)",
        model));
  } else {
    f.refuse(fmt::format("model '{}': no such file or directory", model));
  }
}

void check_engine_core(ServeArgs& a, Findings& f) {
  const EngineConfig& e = a.engine;
  if (!a.api_key) {
    for (const char* var : {"VLLM_API_KEY", "KESTREL_API_KEY"}) {
      const char* v = std::getenv(var);
      if (v != nullptr && *v != '\0') {
        a.api_key = v;
        break;
      }
    }
  }
  constexpr std::string_view kDtypes[] = {"auto", "half",  "float16", "fp16", "bfloat16",
                                          "bf16", "float", "float32", "fp32"};
  if (!contains(kDtypes, e.dtype))
    f.refuse(fmt::format("--dtype {}: not supported (auto, float16, bfloat16, float32)", e.dtype));
  constexpr std::string_view kKvDtypes[] = {"auto",     "float16",  "fp16",  "bfloat16",
                                            "bf16",     "float32",  "fp32",  "fp8",
                                            "fp8_e4m3", "fp8_e5m2", "mxfp8", "int8"};
  if (!contains(kKvDtypes, e.kv_cache_dtype))
    f.refuse(fmt::format(
        "--kv-cache-dtype {}: not supported (auto, bfloat16, float16, float32, fp8, fp8_e4m3, "
        "fp8_e5m2, mxfp8, int8)",
        e.kv_cache_dtype));
  constexpr std::string_view kLoadFormats[] = {"auto", "safetensors", "gguf", "dummy"};
  if (!contains(kLoadFormats, e.load_format))
    f.refuse(fmt::format("--load-format {}: not supported (auto, safetensors, gguf, dummy)",
                         e.load_format));

  // As vLLM: a value without any of "{}\n" names a file.
  const std::string& t = a.chat_template;
  std::error_code ec;
  if (!t.empty() && t.find_first_of("{}\n") == std::string::npos &&
      !std::filesystem::is_regular_file(t, ec))
    f.refuse(
        fmt::format("--chat-template {}: looks like a file path, but there is no such file", t));
  parse_object("--default-chat-template-kwargs", a.default_chat_template_kwargs, f);

  if (a.safetensors_load_strategy != "lazy")
    f.note(fmt::format("--safetensors-load-strategy {} (Kestrel memory-maps the shards)",
                       a.safetensors_load_strategy));
  if (checked_object("--model-loader-extra-config", a.model_loader_extra_config, kLoaderExtraKeys,
                     f))
    f.note("--model-loader-extra-config (a loading-speed knob; Kestrel maps the files)");
  if (a.disable_hybrid_kv_cache_manager)
    f.refuse(
        "--disable-hybrid-kv-cache-manager: not supported; Kestrel always manages KV per layer "
        "group");
  if (a.async_scheduling)
    f.note("--async-scheduling (engine steps run one after another; outputs are the same)");
  if (a.enforce_eager) f.note("--enforce-eager (Kestrel captures no graphs)");
  // Any key: vLLM's compiler settings have no counterpart in Kestrel.
  if (parse_object("--compilation-config", a.compilation_config, f))
    f.note("--compilation-config (no compiler, no graph capture)");
}

void check_parallel(const ServeArgs& a, Findings& f) {
  const ParallelArgs& p = a.parallel;
  const EngineConfig& e = a.engine;
  const int dp = e.data_parallel_size;
  const int local = p.data_parallel_size_local.value_or(dp);
  const int start = p.data_parallel_start_rank.value_or(0);
  if (p.hybrid_lb && (p.external_lb || p.headless || p.data_parallel_rank))
    f.refuse(
        "--data-parallel-hybrid-lb: a node's own server balancing its ranks excludes "
        "--data-parallel-external-lb, --headless and --data-parallel-rank");
  if (p.external_lb && !p.data_parallel_rank)
    f.refuse(
        "--data-parallel-external-lb: give this server's rank with --data-parallel-rank (one "
        "server per rank)");
  if (p.data_parallel_rank) {
    if (*p.data_parallel_rank >= dp)
      f.refuse(fmt::format("--data-parallel-rank {}: not a rank of --data-parallel-size {}",
                           *p.data_parallel_rank, dp));
    if (p.headless)
      f.refuse(
          "--headless with --data-parallel-rank: a rank behind an external "
          "load balancer serves its own requests");
  } else if (local < 1 || start + local > dp) {
    f.refuse(fmt::format(
        "--data-parallel-size-local {} from --data-parallel-start-rank {}: not ranks of "
        "--data-parallel-size {}",
        local, start, dp));
  } else if (p.headless && local == dp) {
    f.refuse(fmt::format(
        "--headless: every one of the {} data-parallel ranks would run here, with no head to "
        "serve them (give --data-parallel-size-local and --data-parallel-start-rank)",
        dp));
  } else if (!p.headless && !p.hybrid_lb && start != 0) {
    f.refuse(fmt::format(
        "--data-parallel-start-rank {}: only a --headless node starts past rank 0 (the head runs "
        "rank 0)",
        start));
  }
  // The address matters across nodes (headless ranks), and to ranks in other servers that share
  // their experts (they meet at rank 0's server: external or hybrid load balancing).
  const bool multi_node = !p.data_parallel_rank && !p.hybrid_lb && local < dp;
  const bool shared_experts = e.enable_expert_parallel && dp > 1 && local < dp;
  if (p.data_parallel_address && !multi_node && !shared_experts)
    f.note(dp == 1 ? "--data-parallel-address (one data-parallel rank: nothing to coordinate)"
                   : "--data-parallel-address (this server's ranks coordinate in-process)");
  if (p.data_parallel_rpc_port && !multi_node && !shared_experts)
    f.note(dp == 1 ? "--data-parallel-rpc-port (one data-parallel rank: nothing to coordinate)"
                   : "--data-parallel-rpc-port (this server's ranks coordinate in-process)");
  if (p.headless && a.api_server_count > 1)
    f.note(
        fmt::format("--api-server-count {} (a --headless node serves no API)", a.api_server_count));
  const int tp = e.tensor_parallel_size;
  if (e.enable_expert_parallel && tp == 1 && dp == 1)
    f.note("--enable-expert-parallel (one rank: all experts are local)");
  if (Status st = check_executor_backend(e); !st.ok()) f.refuse(st.message());
}

void check_quantization(const ServeArgs& a, Findings& f) {
  const std::string& q = a.engine.quantization;
  if (q.empty()) return;
  if (q == "ascend") {
    // Accepted: the loader reads the checkpoint's quant_model_description.json and refuses the
    // types it does not run, naming them.
  } else if (q == "deepseek_v4_fp8") {
    f.refuse("--quantization deepseek_v4_fp8: DeepSeek-V4 FP8 checkpoints are not supported yet");
  } else if (q == "fp8") {
    // Accepted for FP8 block-quantized checkpoints (DeepSeek's format); serve checks the
    // checkpoint once it is loaded.
  } else {
    f.refuse(fmt::format(
        "--quantization {}: not supported (Kestrel reads a GGUF file's quantization from the "
        "file, FP8 block-quantized checkpoints from config.json, and msModelSlim ones with "
        "--quantization ascend; planned: deepseek_v4_fp8)",
        q));
  }
}

// The text alone; the engine checks the config against the model once it is loaded (MTP layers,
// num_speculative_tokens against n_predict).
void check_speculative(const ServeArgs& a, Findings& f) {
  const auto spec = parse_speculative_config(a.engine.speculative_config);
  if (!spec.ok()) f.refuse(spec.error().message);
}

// A side's layout in kv_connector_extra_config, when given, is this instance's own.
void check_kv_layout(const ServeArgs& a, const std::optional<KvLayoutSpec>& layout,
                     const char* side, Findings& f) {
  if (!layout) return;
  const EngineConfig& e = a.engine;
  if (layout->dp_size != e.data_parallel_size || layout->tp_size != e.tensor_parallel_size)
    f.refuse(fmt::format(
        "--kv-transfer-config kv_connector_extra_config.{0}: dp_size {1}, tp_size {2}, but this "
        "{0} instance runs --data-parallel-size {3} and --tensor-parallel-size {4}",
        side, layout->dp_size, layout->tp_size, e.data_parallel_size, e.tensor_parallel_size));
}

// The text and its fit with the other flags; the model's KV layout is checked once it is loaded.
void check_kv_transfer(ServeArgs& a, Findings& f) {
  constexpr std::string_view kFlag = "--kv-transfer-config";
  const auto kv = checked_object(kFlag, a.kv_transfer_config, kKvTransferKeys, f);
  a.engine.kv.reset();
  if (!kv || kv->empty()) return;
  auto parsed = parse_kv_transfer_config(a.kv_transfer_config);
  if (!parsed.ok()) {
    f.refuse(parsed.error().message);
    return;
  }
  if (a.engine.calculate_kv_scales)
    f.refuse(fmt::format(
        "--calculate-kv-scales with {}: each instance would set its own scales from its own "
        "first batch and read the other's blocks with them; give the scales in the checkpoint",
        kFlag));
  if (parsed->produces() && parsed->role != KvRole::kBoth)
    check_kv_layout(a, parsed->prefill, "prefill", f);
  if (parsed->consumes() && parsed->role != KvRole::kBoth)
    check_kv_layout(a, parsed->decode, "decode", f);
  const ParallelArgs& p = a.parallel;
  if (p.headless || (!p.data_parallel_rank && !p.hybrid_lb &&
                     p.data_parallel_size_local.value_or(a.engine.data_parallel_size) <
                         a.engine.data_parallel_size))
    f.refuse(fmt::format(
        "{}: a node's data-parallel ranks serve their KV from that node, so each node runs its "
        "own server (--data-parallel-rank per rank, or --data-parallel-hybrid-lb), not "
        "--headless ranks behind a head",
        kFlag));
  if (kv->contains("kv_connector_module_path"))
    f.note(fmt::format("{} kv_connector_module_path (Kestrel's connector is built in)", kFlag));
  if (parsed->kv_buffer_device != "cpu")
    f.note(fmt::format("{} kv_buffer_device={} (the KV moves from where the engine keeps it)",
                       kFlag, parsed->kv_buffer_device));
  a.engine.kv.emplace();
  a.engine.kv->transfer = *parsed;
}

void check_additional_config(ServeArgs& a, Findings& f) {
  constexpr std::string_view kFlag = "--additional-config";
  a.engine.give_back_preempted = false;
  const auto extra = parse_object(kFlag, a.additional_config, f);
  if (!extra || !check_keys(*extra, kAdditionalKeys, kFlag, "", UnknownKeys::kWarn, f)) return;
  std::string ignored;
  for (const JsonKey& key : kAdditionalKeys) {
    if (!extra->contains(key.name)) continue;
    const json& v = (*extra)[std::string(key.name)];
    if (key.name == "recompute_scheduler_enable" || key.name == "scheduler_config") {
      const json& flag =
          key.name == "scheduler_config" ? v.value("recompute_scheduler_enable", json(false)) : v;
      if (!flag.get<bool>()) continue;
      // vLLM-Ascend's recompute scheduler changes only a decode instance: a request it has no
      // blocks for goes back to the proxy instead of waiting here.
      if (a.engine.kv && a.engine.kv->transfer.role == KvRole::kConsumer) {
        a.engine.give_back_preempted = true;
      } else {
        f.note(
            fmt::format("{} {}recompute_scheduler_enable (only a kv_consumer gives requests "
                        "back)",
                        kFlag, key.name == "scheduler_config" ? "scheduler_config." : ""));
      }
      continue;
    }
    ignored.append(ignored.empty() ? "" : ", ").append(key.name);
  }
  if (!ignored.empty()) f.note(fmt::format("{} {} (vLLM-Ascend platform options)", kFlag, ignored));
}

void check_multimodal(const ServeArgs& a, Findings& f) {
  // A limit of 0 is what Kestrel does anyway (no image input: requests with images get 400).
  if (const auto limits =
          checked_object("--limit-mm-per-prompt", a.limit_mm_per_prompt, kModalityKeys, f)) {
    const bool nonzero = std::any_of(limits->begin(), limits->end(),
                                     [](const json& v) { return v.get<uint64_t>() > 0; });
    if (nonzero) f.note("--limit-mm-per-prompt (Kestrel takes no image, video or audio input)");
  }
  if (!a.allowed_local_media_path.empty()) f.note("--allowed-local-media-path (no image input)");
  if (a.mm_processor_cache_gb) f.note("--mm-processor-cache-gb (no multimodal processor)");
  if (!a.mm_encoder_tp_mode.empty()) f.note("--mm-encoder-tp-mode (no vision encoder)");
}

void check_tokenizer_mode_and_parsers(const ServeArgs& a, Findings& f) {
  // deepseek_v32 and deepseek_v4 are the tokenizer's own; they select a native chat encoder.
  constexpr std::string_view kModes = "auto, hf, deepseek_v32, deepseek_v4";
  if (a.tokenizer_mode == "deepseek_v41") {
    f.refuse(fmt::format("--tokenizer-mode deepseek_v41: not supported yet ({})", kModes));
  } else if (a.tokenizer_mode != "auto" && a.tokenizer_mode != "hf" &&
             !chat::deepseek_encoding(a.tokenizer_mode)) {
    f.refuse(fmt::format("--tokenizer-mode {}: not supported ({})", a.tokenizer_mode, kModes));
  }
  const std::vector<std::string>& tools = chat::tool_parser_names();
  if (!a.tool_call_parser.empty() &&
      std::find(tools.begin(), tools.end(), a.tool_call_parser) == tools.end())
    f.refuse(fmt::format("--tool-call-parser {}: not supported ({})", a.tool_call_parser,
                         fmt::join(tools, ", ")));
  const std::vector<std::string>& reasoning = chat::reasoning_parser_names();
  if (!a.reasoning_parser.empty() &&
      std::find(reasoning.begin(), reasoning.end(), a.reasoning_parser) == reasoning.end())
    f.refuse(fmt::format("--reasoning-parser {}: not supported ({})", a.reasoning_parser,
                         fmt::join(reasoning, ", ")));
  if (a.enable_auto_tool_choice && a.tool_call_parser.empty())
    f.refuse("--enable-auto-tool-choice: needs --tool-call-parser");
}

void check_deepseek_v41(const ServeArgs& a, Findings& f) {
  if (!a.engram_config.empty()) {
    checked_object("--engram-config", a.engram_config, kEngramKeys, f);
    f.refuse(
        "--engram-config: needs a model with Engram layers (DeepSeek-V4.1), which Kestrel does "
        "not support yet");
  }
  if (!a.swa_bounded_replay)
    f.warn(
        "--no-swa-bounded-replay is ignored: Kestrel has no bounded replay to turn off (on a "
        "prefix "
        "hit its sliding-window layers reuse the cached blocks of the last window)");
}

// An exact option name, the one option a prefix names, or `name` unchanged when nothing
// matches (CLI11 then reports it as unrecognized).
Expected<std::string> expand_prefix(
    const std::vector<std::pair<std::string, const CLI::Option*>>& names, const std::string& name) {
  if (name.empty()) return name;
  for (const auto& [n, opt] : names)
    if (n == name) return name;
  const CLI::Option* match = nullptr;
  bool ambiguous = false;
  std::string expansion, candidates;
  for (const auto& [n, opt] : names) {
    if (!n.starts_with(name)) continue;
    if (match == nullptr) {
      match = opt;
      expansion = n;
    } else if (opt != match) {
      ambiguous = true;
    }
    candidates.append(candidates.empty() ? "--" : ", --").append(n);
  }
  if (match == nullptr) return name;
  if (ambiguous) return make_error("ambiguous option: --{} could match {}", name, candidates);
  return expansion;
}

}  // namespace

// --help lists the flags in groups, in this order; a flag not listed stays under "Options".
void group_flags(CLI::App& app) {
  static const std::vector<std::pair<const char*, std::vector<const char*>>> kGroups = {
      {"Model",
       {"--model", "--tokenizer", "--load-format", "--dtype", "--quantization", "--quant-compute",
        "--tokenizer-mode", "--trust-remote-code", "--safetensors-load-strategy",
        "--model-loader-extra-config", "--seed"}},
      {"Scheduling and KV cache",
       {"--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--block-size",
        "--enable-prefix-caching", "--enable-chunked-prefill", "--kv-cache-memory",
        "--gpu-memory-utilization", "--kv-cache-dtype", "--threads", "--pin-threads",
        "--disable-hybrid-kv-cache-manager", "--async-scheduling", "--enforce-eager",
        "--compilation-config", "--swa-bounded-replay"}},
      {"API server",
       {"--host", "--port", "--api-key", "--served-model-name", "--chat-template",
        "--default-chat-template-kwargs", "--max-logprobs", "--disable-log-requests",
        "--enable-log-requests", "--uvicorn-log-level", "--log-level", "--shutdown-timeout",
        "--api-server-count"}},
      {"Tool calling and reasoning",
       {"--tool-call-parser", "--reasoning-parser", "--enable-auto-tool-choice"}},
      {"Parallelism",
       {"--tensor-parallel-size", "--data-parallel-size", "--data-parallel-size-local",
        "--data-parallel-start-rank", "--data-parallel-rank", "--data-parallel-address",
        "--data-parallel-rpc-port", "--headless", "--data-parallel-hybrid-lb",
        "--data-parallel-external-lb", "--enable-expert-parallel",
        "--distributed-executor-backend"}},
      {"Speculative decoding, PD disaggregation, platform",
       {"--speculative-config", "--kv-transfer-config", "--additional-config", "--engram-config"}},
      {"Multimodal (text-only models: accepted for compatibility)",
       {"--limit-mm-per-prompt", "--allowed-local-media-path", "--mm-processor-cache-gb",
        "--mm-encoder-tp-mode"}},
  };
  for (CLI::Option* opt : app.get_options()) {
    for (const auto& [group, names] : kGroups) {
      const bool member = std::any_of(names.begin(), names.end(),
                                      [&](const char* n) { return opt->check_name(n); });
      if (member) {
        opt->group(group);
        break;
      }
    }
  }
}

void add_serve_args(CLI::App& app, ServeArgs& a) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("MODEL", a.engine.model,
                 "model directory (config.json + safetensors) or .gguf file");
  app.add_option("--model", a.model_option, "the model, instead of the positional MODEL");
  add_engine_args(app, a.engine, /*model_required=*/false);
  app.get_option("--max-model-len")->transform(expand_human_count);

  // §1: serve core.
  app.add_option("--host", a.host, "HTTP bind address");
  app.add_option("--port", a.port, "HTTP port")->check(CLI::Range(0, 65535));
  app.add_option("--api-key", a.api_key,
                 "require 'Authorization: Bearer KEY' on /v1 (default: env VLLM_API_KEY, then "
                 "KESTREL_API_KEY)");
  app.add_option("--served-model-name", a.served_model_names,
                 "model name(s) clients send; default: MODEL as given")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--chat-template", a.chat_template, "chat template file, or the template text");
  app.add_option("--default-chat-template-kwargs", a.default_chat_template_kwargs,
                 "JSON object of extra chat-template variables");
  app.add_option("--max-logprobs", a.max_logprobs, "most logprobs a request may ask for")
      ->check(CLI::Range(0, 1 << 20));
  add_bool(app, "disable-log-requests", a.disable_log_requests,
           "do not log requests (the default; kept for older scripts)");
  add_bool(app, "enable-log-requests", a.enable_log_requests, "log each request");
  app.add_option("--uvicorn-log-level", a.uvicorn_log_level, "HTTP layer log level")
      ->check(CLI::IsMember(
          std::vector<std::string>{"critical", "error", "warning", "info", "debug", "trace"}));
  app.add_option("--shutdown-timeout", a.shutdown_grace_s,
                 "seconds running requests may finish after SIGTERM/SIGINT (Kestrel's own)")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--tokenizer-mode", a.tokenizer_mode,
                 "auto | hf | deepseek_v32 | deepseek_v4 (DeepSeek's native chat encoders)");
  add_bool(app, "trust-remote-code", a.trust_remote_code,
           "accepted for vLLM scripts; Kestrel runs no checkpoint code");
  app.add_option("--safetensors-load-strategy", a.safetensors_load_strategy,
                 "lazy (memory-mapped, always) | eager | prefetch (no effect)")
      ->check(CLI::IsMember(std::vector<std::string>{"lazy", "eager", "prefetch"}));
  app.add_option("--model-loader-extra-config", a.model_loader_extra_config,
                 "JSON object (no effect)");
  add_bool(app, "disable-hybrid-kv-cache-manager", a.disable_hybrid_kv_cache_manager,
           "refused: Kestrel always manages KV per layer group");
  add_bool(app, "async-scheduling", a.async_scheduling, "no effect");
  add_bool(app, "enforce-eager", a.enforce_eager, "no effect (Kestrel captures no graphs)");
  app.add_option("--compilation-config", a.compilation_config, "JSON object (no effect)");

  // §2: parallelism.
  ParallelArgs& p = a.parallel;
  app.add_option("--data-parallel-size-local", p.data_parallel_size_local,
                 "data-parallel ranks on this node (the rest: --headless nodes, or other "
                 "nodes' servers with --data-parallel-hybrid-lb)")
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--data-parallel-start-rank", p.data_parallel_start_rank,
                 "the first data-parallel rank on this node")
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--data-parallel-rank", p.data_parallel_rank,
                 "this server is that rank only, behind an external load balancer")
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--data-parallel-address", p.data_parallel_address,
                 "rank 0's node: where --headless ranks and expert-parallel peers meet it");
  app.add_option("--data-parallel-rpc-port", p.data_parallel_rpc_port,
                 "rank 0's port there (headless rank d: this + d)")
      ->check(CLI::Range(0, 65535));
  add_bool(app, "headless", p.headless,
           "engines only: this node's ranks, for the head at --data-parallel-address");
  add_bool(app, "data-parallel-hybrid-lb", p.hybrid_lb,
           "this node's server balances its own ranks (--data-parallel-size-local from "
           "--data-parallel-start-rank)");
  add_bool(app, "data-parallel-external-lb", p.external_lb,
           "this server is one rank (--data-parallel-rank) behind an external load balancer");
  app.add_option("--api-server-count", a.api_server_count,
                 "HTTP front ends sharing the port (each with its own listener and threads)")
      ->check(CLI::Range(1, 1024));

  // §3–§6: quantization, PD, platform options (--speculative-config is an engine flag).
  app.add_option("--quantization", a.engine.quantization,
                 "empty: from the checkpoint; ascend (msModelSlim W8A8 / W8A8_DYNAMIC), fp8 "
                 "(DeepSeek's block FP8)");
  app.add_option("--kv-transfer-config", a.kv_transfer_config,
                 "JSON object: prefill/decode disaggregation (kv_connector, kv_role, kv_port, "
                 "engine_id, kv_load_failure_policy, kv_connector_extra_config)");
  app.add_option("--additional-config", a.additional_config,
                 "JSON object of vLLM-Ascend platform options (no effect)");

  // §7–§9: multimodal, parsers, DeepSeek-V4.1.
  app.add_option("--limit-mm-per-prompt", a.limit_mm_per_prompt,
                 "JSON object; Kestrel takes text only");
  app.add_option("--allowed-local-media-path", a.allowed_local_media_path, "no effect");
  app.add_option("--mm-processor-cache-gb", a.mm_processor_cache_gb, "no effect")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--mm-encoder-tp-mode", a.mm_encoder_tp_mode, "no effect")
      ->check(CLI::IsMember(std::vector<std::string>{"weights", "data"}));
  app.add_option("--tool-call-parser", a.tool_call_parser,
                 "hermes, qwen3_coder, deepseek_v3, deepseek_v31, deepseek_v32, deepseek_v4, "
                 "llama3_json, mistral");
  app.add_option("--reasoning-parser", a.reasoning_parser,
                 "split reasoning into message.reasoning: qwen3, deepseek_r1, deepseek_v3, "
                 "deepseek_v31, deepseek_v32, deepseek_v4");
  add_bool(app, "enable-auto-tool-choice", a.enable_auto_tool_choice,
           "tool_choice \"auto\": parse tool calls out of the output (needs --tool-call-parser)");
  app.add_option("--engram-config", a.engram_config, "refused (DeepSeek-V4.1)");
  add_bool(app, "swa-bounded-replay", a.swa_bounded_replay,
           "accepted, no effect: a prefix hit reuses the cached blocks of the last sliding window");
  group_flags(app);
}

Expected<std::vector<std::string>> normalize_vllm_argv(const CLI::App& app,
                                                       const std::vector<std::string>& argv) {
  std::vector<std::pair<std::string, const CLI::Option*>> names;
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& n : opt->get_lnames()) names.emplace_back(n, opt);
  std::vector<std::string> out;
  out.reserve(argv.size());
  bool options_ended = false;
  for (const std::string& arg : argv) {
    if (options_ended || arg.size() < 3 || !arg.starts_with("--")) {
      options_ended = options_ended || arg == "--";
      out.push_back(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    std::replace(name.begin(), name.end(), '_', '-');
    KASSIGN(name, expand_prefix(names, name));
    out.push_back("--" + name + (eq == std::string::npos ? "" : arg.substr(eq)));
  }
  return out;
}

Status finalize_serve_args(ServeArgs& a) {
  a.notes.clear();
  a.warnings.clear();
  Findings f{{}, a.notes, a.warnings};
  if (Status st = read_engine_environment(a.engine); !st.ok()) f.refuse(st.message());
  check_model(a, f);
  check_engine_core(a, f);
  check_parallel(a, f);
  check_quantization(a, f);
  check_speculative(a, f);
  check_kv_transfer(a, f);
  check_additional_config(a, f);
  check_multimodal(a, f);
  check_tokenizer_mode_and_parsers(a, f);
  check_deepseek_v41(a, f);
  const ParallelArgs& p = a.parallel;
  EngineConfig& e = a.engine;
  if (p.data_parallel_address) e.data_parallel_address = *p.data_parallel_address;
  if (p.data_parallel_rpc_port) e.data_parallel_rpc_port = *p.data_parallel_rpc_port;
  if (p.data_parallel_rank) {
    // External load balancing (one server per rank, as launch_online_dp.py starts them): this
    // server runs its rank alone.
    e.data_parallel_first = *p.data_parallel_rank;
    e.data_parallel_count = 1;
  } else if (p.data_parallel_size_local && *p.data_parallel_size_local < e.data_parallel_size) {
    // Multi-node: this node runs its ranks; with internal load balancing the head also waits
    // for the rest (--headless nodes), with hybrid each node's server serves its own.
    e.data_parallel_first = p.data_parallel_start_rank.value_or(0);
    e.data_parallel_count = *p.data_parallel_size_local;
    if (!p.headless && !p.hybrid_lb)
      e.data_parallel_remote = e.data_parallel_size - e.data_parallel_count;
  }
  if (f.refusals.empty()) return Status::Ok();
  std::string message;
  for (const std::string& r : f.refusals) message.append(message.empty() ? "" : "\n").append(r);
  return Error{message};
}

}  // namespace kestrel::cli
