// ModelConfig from GGUF metadata (models.md §8.2). finalize() is left to the caller.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf.h"
#include "model/config.h"

namespace kestrel {
namespace {

struct ArchTraits {
  const char* name;          // general.architecture and ModelConfig::model_type
  const char* architecture;  // Hugging Face class name
  bool rope_interleaved;     // llama q/k rows are permuted to Meta's interleaved layout (§8.4)
  bool attention_bias;
  bool qk_norm;
};

constexpr ArchTraits kArchs[] = {
    {"llama", "LlamaForCausalLM", true, false, false},
    {"qwen2", "Qwen2ForCausalLM", false, true, false},
    {"qwen3", "Qwen3ForCausalLM", false, false, true},
    {"gemma3", "Gemma3ForCausalLM", false, false, true},
};

// Reads `<arch>.<suffix>` keys with messages that name the key.
class MetaReader {
 public:
  MetaReader(const GgufFile& g, std::string prefix) : g_(g), prefix_(std::move(prefix)) {}

  std::string key(const std::string& suffix) const { return prefix_ + "." + suffix; }

  Expected<int64_t> required_int(const std::string& suffix) const {
    const std::string k = key(suffix);
    const auto v = g_.get_int(k);
    if (!v) return make_error("GGUF: missing or non-integer metadata key '{}'", k);
    if (*v <= 0) return make_error("GGUF: metadata key '{}' must be positive (got {})", k, *v);
    return *v;
  }

  // A float32 value is widened through its shortest decimal form (1e-5f -> 1e-5), so a GGUF
  // yields the same double as the config.json the model was converted from.
  std::optional<double> float_key(const std::string& suffix) const {
    const GgufValue* v = g_.find(key(suffix));
    const auto d = v ? v->as_float() : std::nullopt;
    if (d && v->type == GgufType::F32) {
      return std::strtod(fmt::format("{}", float(*d)).c_str(), nullptr);
    }
    return d;
  }

 private:
  const GgufFile& g_;
  std::string prefix_;
};

Status read_rope_scaling(const GgufFile& g, const MetaReader& m, RopeScaling* rs) {
  const auto type = g.get_string(m.key("rope.scaling.type"));
  if (!type || *type == "none") return Status::Ok();
  if (*type == "linear") {
    rs->type = RopeScalingType::kLinear;
  } else if (*type == "yarn") {
    rs->type = RopeScalingType::kYarn;
  } else {
    return make_error("GGUF: unsupported '{}' = '{}' (supported: none, linear, yarn)",
                      m.key("rope.scaling.type"), *type);
  }
  const auto factor = m.float_key("rope.scaling.factor");
  if (!factor || !(*factor > 0) || !std::isfinite(*factor)) {
    return make_error("GGUF: rope scaling '{}' needs a positive finite '{}'", *type,
                      m.key("rope.scaling.factor"));
  }
  rs->factor = *factor;
  if (const auto orig = g.get_int(m.key("rope.scaling.original_context_length"))) {
    rs->original_max_position_embeddings = *orig;
  }
  if (rs->type == RopeScalingType::kYarn) {
    if (const auto v = m.float_key("rope.scaling.yarn_beta_fast")) rs->beta_fast = *v;
    if (const auto v = m.float_key("rope.scaling.yarn_beta_slow")) rs->beta_slow = *v;
    if (const auto v = m.float_key("rope.scaling.attn_factor")) rs->attention_factor = *v;
  }
  return Status::Ok();
}

// Chat formats' end-of-turn markers also end generation, as llama.cpp decides it from the
// vocabulary: files often name only the EOS (Gemma3's declares <eos>, not <end_of_turn>).
void add_end_of_turn_tokens(const GgufFile& g, std::vector<int64_t>& eos) {
  static constexpr std::string_view kMarkers[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>",         "<end_of_turn>",     "<|endoftext|>",
      "<|eom_id|>", "<EOT>",      "<|end_of_text|>", "<end_of_utterance>"};
  const GgufValue* tokens = g.find("tokenizer.ggml.tokens");
  const GgufArray* arr = tokens ? tokens->as_array() : nullptr;
  if (arr == nullptr) return;
  for (size_t id = 0; id < arr->items.size(); ++id) {
    const std::string* t = arr->items[id].as_string();
    if (t == nullptr ||
        std::find(std::begin(kMarkers), std::end(kMarkers), *t) == std::end(kMarkers))
      continue;
    if (std::find(eos.begin(), eos.end(), int64_t(id)) == eos.end()) eos.push_back(int64_t(id));
  }
}

// Gemma3 (models.md 6) as llama.cpp reads it: what the converter leaves out of the metadata is
// fixed for the family — every sixth layer global, the sliding layers' RoPE base 10000 — and
// the norm weights are stored with Gemma's 1 already added.
Status read_gemma3(const GgufFile& g, const MetaReader& m, ModelConfig* c) {
  c->model_type = "gemma3_text";
  c->hidden_act = "gelu_pytorch_tanh";
  c->scale_embeddings = true;
  c->sandwich_norms = true;
  c->norm_offset = true;
  c->norm_weights_include_offset = true;
  c->rope_local_theta = 10000.0;
  // Queries are scaled by head_dim^-0.5, except in the 27B (62 layers): hidden / heads.
  c->query_pre_attn_scalar = c->num_hidden_layers == 62
                                 ? double(c->hidden_size / c->num_attention_heads)
                                 : double(c->head_dim > 0 ? c->head_dim : 256);
  if (const auto cap = m.float_key("final_logit_softcapping")) c->final_logit_softcapping = *cap;
  if (!g.find(m.key("attention.sliding_window"))) return Status::Ok();
  KASSIGN(const int64_t window, m.required_int("attention.sliding_window"));
  c->layer_sliding_window.assign(size_t(c->num_hidden_layers), 0);
  for (int64_t i = 0; i < c->num_hidden_layers; ++i)
    if ((i + 1) % 6 != 0) c->layer_sliding_window[size_t(i)] = int32_t(window);
  return Status::Ok();
}

}  // namespace

Expected<ModelConfig> config_from_gguf(const GgufFile& g) {
  const auto arch = g.get_string("general.architecture");
  if (!arch) return make_error("GGUF: missing string metadata key 'general.architecture'");
  const ArchTraits* traits = nullptr;
  for (const ArchTraits& t : kArchs) {
    if (*arch == t.name) traits = &t;
  }
  if (!traits) {
    return make_error(
        "GGUF: architecture '{}' is not supported (supported: llama, qwen2, qwen3, gemma3)", *arch);
  }

  ModelConfig c;
  c.model_type = traits->name;
  c.architecture = traits->architecture;
  c.rope_interleaved = traits->rope_interleaved;
  c.attention_bias = traits->attention_bias;
  c.qk_norm = traits->qk_norm;

  const MetaReader m(g, *arch);
  KASSIGN(c.hidden_size, m.required_int("embedding_length"));
  KASSIGN(c.num_hidden_layers, m.required_int("block_count"));
  KASSIGN(c.intermediate_size, m.required_int("feed_forward_length"));
  KASSIGN(c.num_attention_heads, m.required_int("attention.head_count"));
  if (g.find(m.key("attention.head_count_kv"))) {
    KASSIGN(c.num_key_value_heads, m.required_int("attention.head_count_kv"));
  } else {
    c.num_key_value_heads = c.num_attention_heads;
  }
  if (g.find(m.key("context_length"))) {
    KASSIGN(c.max_position_embeddings, m.required_int("context_length"));
  }
  if (g.find(m.key("attention.key_length"))) {
    KASSIGN(c.head_dim, m.required_int("attention.key_length"));
    const auto v_len = g.get_int(m.key("attention.value_length"));
    if (v_len && *v_len != c.head_dim) {
      return make_error("GGUF: key_length {} != value_length {} is not supported", c.head_dim,
                        *v_len);
    }
  }
  if (g.find(m.key("rope.dimension_count"))) {
    KASSIGN(c.rope_dim, m.required_int("rope.dimension_count"));
  }

  const auto eps = m.float_key("attention.layer_norm_rms_epsilon");
  if (!eps || !(*eps > 0) || !std::isfinite(*eps)) {
    return make_error("GGUF: missing, non-positive or non-finite '{}'",
                      m.key("attention.layer_norm_rms_epsilon"));
  }
  c.rms_norm_eps = *eps;
  c.rope_theta = m.float_key("rope.freq_base").value_or(10000.0);
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) {
    return make_error("GGUF: '{}' must be positive and finite", m.key("rope.freq_base"));
  }
  KTRY(read_rope_scaling(g, m, &c.rope_scaling));

  if (g.find(m.key("vocab_size"))) {
    KASSIGN(c.vocab_size, m.required_int("vocab_size"));
  } else {
    const GgufValue* tokens = g.find("tokenizer.ggml.tokens");
    const GgufArray* arr = tokens ? tokens->as_array() : nullptr;
    if (!arr || arr->items.empty()) {
      return make_error("GGUF: vocabulary size unknown (no '{}' and no tokenizer.ggml.tokens)",
                        m.key("vocab_size"));
    }
    c.vocab_size = int64_t(arr->items.size());
  }

  // Without a separate output projection the embedding matrix doubles as the LM head.
  c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;

  if (const auto eos = g.get_int("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(*eos);
  if (const auto eot = g.get_int("tokenizer.ggml.eot_token_id")) {
    if (c.eos_token_ids.empty() || c.eos_token_ids[0] != *eot) c.eos_token_ids.push_back(*eot);
  }
  add_end_of_turn_tokens(g, c.eos_token_ids);
  c.bos_token_id = g.get_int("tokenizer.ggml.bos_token_id");
  if (*arch == "gemma3") KTRY(read_gemma3(g, m, &c));
  return c;
}

}  // namespace kestrel
