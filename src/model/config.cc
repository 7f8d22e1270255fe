#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "base/mmap_file.h"

namespace kestrel {
namespace {

using nlohmann::json;

// False when `v` is not an integer that fits in int64.
bool as_int64(const json& v, int64_t& out) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    return false;
  out = v.get<int64_t>();
  return true;
}

// Typed, non-throwing access to the fields of one JSON object. Errors read
// "<file>: '<path.key>' must be ..."; a null value counts as absent (transformers writes nulls).
class FieldReader {
 public:
  FieldReader(const json& obj, std::string file, std::string path = "")
      : obj_(obj), file_(std::move(file)), path_(std::move(path)) {}

  const json* find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const char* key) const { return find(key) != nullptr; }

  Error type_error(const char* key, const char* what) const {
    return make_error("{}: '{}{}' must be {}", file_, path_, key, what);
  }

  Status get(const char* key, int64_t& out) const {
    const json* v = find(key);
    if (!v) return Status::Ok();
    if (!as_int64(*v, out)) return type_error(key, "an integer");
    return Status::Ok();
  }
  Status get(const char* key, double& out) const {
    const json* v = find(key);
    if (!v) return Status::Ok();
    if (!v->is_number()) return type_error(key, "a number");
    out = v->get<double>();
    return Status::Ok();
  }
  Status get(const char* key, bool& out) const {
    const json* v = find(key);
    if (!v) return Status::Ok();
    if (!v->is_boolean()) return type_error(key, "a boolean");
    out = v->get<bool>();
    return Status::Ok();
  }
  Status get(const char* key, std::string& out) const {
    const json* v = find(key);
    if (!v) return Status::Ok();
    if (!v->is_string()) return type_error(key, "a string");
    out = v->get<std::string>();
    return Status::Ok();
  }
  template <typename T>
  Status get(const char* key, std::optional<T>& out) const {
    if (!has(key)) return Status::Ok();
    T value{};
    KTRY(get(key, value));
    out = value;
    return Status::Ok();
  }
  Status get(const char* key, std::vector<int64_t>& out) const {
    const json* v = find(key);
    if (!v) return Status::Ok();
    if (!v->is_array()) return type_error(key, "a list of integers");
    out.clear();
    for (const auto& e : *v)
      if (!as_int64(e, out.emplace_back())) return type_error(key, "a list of integers");
    return Status::Ok();
  }
  // An id or a list of ids (eos_token_id may be either).
  Status get_ids(const char* key, std::vector<int64_t>& out) const {
    const json* v = find(key);
    if (!v) return Status::Ok();
    out.clear();
    if (!v->is_array()) {
      if (!as_int64(*v, out.emplace_back()))
        return type_error(key, "an integer or a list of integers");
      return Status::Ok();
    }
    for (const auto& id : *v)
      if (!as_int64(id, out.emplace_back()))
        return type_error(key, "an integer or a list of integers");
    return Status::Ok();
  }

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

 private:
  const json& obj_;
  std::string file_;
  std::string path_;
};

Expected<json> parse_object(const std::string& text, const std::string& file) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for huge numbers
    return make_error("{}: invalid JSON: {}", file, e.what());
  }
  if (!j.is_object()) return make_error("{}: top level is not a JSON object", file);
  return j;
}

Expected<RopeScalingType> rope_type_from_string(const std::string& s, const std::string& where) {
  if (s == "default" || s == "none") return RopeScalingType::kNone;
  if (s == "linear") return RopeScalingType::kLinear;
  if (s == "dynamic") return RopeScalingType::kDynamic;
  if (s == "llama3") return RopeScalingType::kLlama3;
  if (s == "yarn") return RopeScalingType::kYarn;
  return make_error(
      "{}: unsupported rope type '{}' (supported: default, none, linear, dynamic, llama3, yarn)",
      where, s);
}

// Reads rope_scaling (4.x) or rope_parameters (5.x); both carry the same keys.
Status parse_rope(const FieldReader& r, ModelConfig& c) {
  std::string type_name = "default";
  KTRY(r.get("type", type_name));  // legacy key; rope_type wins when both are present
  KTRY(r.get("rope_type", type_name));
  RopeScaling& s = c.rope_scaling;
  KASSIGN(s.type, rope_type_from_string(type_name, r.file()));
  KTRY(r.get("rope_theta", c.rope_theta));
  if (s.type == RopeScalingType::kNone) return Status::Ok();

  const bool has_factor = r.has("factor");
  KTRY(r.get("factor", s.factor));
  KTRY(r.get("original_max_position_embeddings", s.original_max_position_embeddings));
  if (s.type == RopeScalingType::kLlama3) {
    KTRY(r.get("low_freq_factor", s.low_freq_factor));
    KTRY(r.get("high_freq_factor", s.high_freq_factor));
  }
  if (s.type == RopeScalingType::kYarn) {
    KTRY(r.get("beta_fast", s.beta_fast));
    KTRY(r.get("beta_slow", s.beta_slow));
    KTRY(r.get("attention_factor", s.attention_factor));
    KTRY(r.get("mscale", s.mscale));
    KTRY(r.get("mscale_all_dim", s.mscale_all_dim));
    KTRY(r.get("truncate", s.truncate));
    // transformers derives a missing yarn factor from the context extension.
    if (!has_factor && s.original_max_position_embeddings > 0) {
      s.factor = double(c.max_position_embeddings) / double(s.original_max_position_embeddings);
      return Status::Ok();
    }
  }
  if (!has_factor)
    return make_error("{}: '{}factor' is required for rope type '{}'", r.file(), r.path(),
                      type_name);
  return Status::Ok();
}

// Qwen3-MoE keys (5.x writes num_local_experts, released configs num_experts).
Status parse_qwen3_moe(const FieldReader& r, ModelConfig& c) {
  MoeConfig& m = c.moe;
  KTRY(r.get("num_local_experts", m.num_experts));
  KTRY(r.get("num_experts", m.num_experts));
  KTRY(r.get("num_experts_per_tok", m.num_experts_per_tok));
  KTRY(r.get("moe_intermediate_size", m.moe_intermediate_size));
  KTRY(r.get("norm_topk_prob", m.norm_topk_prob));
  KTRY(r.get("decoder_sparse_step", m.decoder_sparse_step));
  KTRY(r.get("mlp_only_layers", m.mlp_only_layers));
  c.qk_norm = true;
  return Status::Ok();
}

// DeepSeek-V3 keys. head_dim in 5.x files is a derived key (the rope width): ignored here.
Status parse_deepseek_v3(const FieldReader& r, ModelConfig& c) {
  MoeConfig& m = c.moe;
  m.router = MoeConfig::Router::kGroupedSigmoid;
  KTRY(r.get("n_routed_experts", m.num_experts));
  KTRY(r.get("num_experts_per_tok", m.num_experts_per_tok));
  KTRY(r.get("moe_intermediate_size", m.moe_intermediate_size));
  KTRY(r.get("norm_topk_prob", m.norm_topk_prob));
  KTRY(r.get("n_shared_experts", m.num_shared_experts));
  KTRY(r.get("n_group", m.n_group));
  KTRY(r.get("topk_group", m.topk_group));
  KTRY(r.get("routed_scaling_factor", m.routed_scaling_factor));
  KTRY(r.get("first_k_dense_replace", m.first_k_dense_replace));
  int64_t moe_layer_freq = 1;
  KTRY(r.get("moe_layer_freq", moe_layer_freq));
  if (moe_layer_freq != 1)
    return make_error("{}: moe_layer_freq {} is not supported (DeepSeek-V3 uses 1)", r.file(),
                      moe_layer_freq);
  std::string scoring = "sigmoid", topk_method = "noaux_tc";
  KTRY(r.get("scoring_func", scoring));
  KTRY(r.get("topk_method", topk_method));
  if (scoring != "sigmoid" || topk_method != "noaux_tc")
    return make_error(
        "{}: router scoring_func '{}' with topk_method '{}' is not supported (DeepSeek-V3's "
        "sigmoid with noaux_tc is)",
        r.file(), scoring, topk_method);

  MlaConfig& a = c.mla;
  KTRY(r.get("q_lora_rank", a.q_lora_rank));
  KTRY(r.get("kv_lora_rank", a.kv_lora_rank));
  KTRY(r.get("qk_nope_head_dim", a.qk_nope_head_dim));
  KTRY(r.get("qk_rope_head_dim", a.qk_rope_head_dim));
  KTRY(r.get("v_head_dim", a.v_head_dim));
  const std::pair<const char*, int64_t> widths[] = {{"kv_lora_rank", a.kv_lora_rank},
                                                    {"qk_nope_head_dim", a.qk_nope_head_dim},
                                                    {"qk_rope_head_dim", a.qk_rope_head_dim},
                                                    {"v_head_dim", a.v_head_dim}};
  for (const auto& [name, v] : widths)
    if (v <= 0)
      return make_error("{}: '{}' must be a positive integer (got {})", r.file(), name, v);
  if (a.q_lora_rank < 0) return make_error("{}: 'q_lora_rank' must be positive or null", r.file());
  // Attention runs over [nope | rope] query/key heads; RoPE covers the rope part only.
  c.head_dim = a.qk_nope_head_dim + a.qk_rope_head_dim;
  c.rope_dim = a.qk_rope_head_dim;
  c.rope_interleaved = true;
  KTRY(r.get("rope_interleave", c.rope_interleaved));
  c.num_key_value_heads = c.num_attention_heads;
  KTRY(r.get("num_nextn_predict_layers", c.num_nextn_predict_layers));
  return Status::Ok();
}

// mlp_layer_types (transformers 5.x writes it for DeepSeek): "dense" or "sparse" per layer, which
// then alone decides where the experts are.
Status parse_mlp_layer_types(const FieldReader& r, ModelConfig& c) {
  const json* types = r.find("mlp_layer_types");
  if (types == nullptr) return Status::Ok();
  if (!types->is_array() || int64_t(types->size()) != c.num_hidden_layers)
    return r.type_error("mlp_layer_types", "a list with one entry per hidden layer");
  c.moe.first_k_dense_replace = 0;
  c.moe.mlp_only_layers.clear();
  for (size_t i = 0; i < types->size(); ++i) {
    const json& t = (*types)[i];
    if (!t.is_string() || (t != "dense" && t != "sparse"))
      return r.type_error("mlp_layer_types", "a list of \"dense\" or \"sparse\"");
    if (t == "dense") c.moe.mlp_only_layers.push_back(int64_t(i));
  }
  return Status::Ok();
}

// DeepSeek-V3.2: V3 plus the lightning indexer on every layer (layer_types, when written, says
// "indexed_attention" for each).
Status parse_deepseek_v32(const FieldReader& r, ModelConfig& c) {
  KTRY(parse_deepseek_v3(r, c));
  SparseIndexerConfig& x = c.indexer;
  x = {64, 128, 2048};  // transformers' defaults (the released values)
  KTRY(r.get("index_n_heads", x.num_heads));
  KTRY(r.get("index_head_dim", x.head_dim));
  KTRY(r.get("index_topk", x.top_k));
  const std::pair<const char*, int64_t> dims[] = {
      {"index_n_heads", x.num_heads}, {"index_head_dim", x.head_dim}, {"index_topk", x.top_k}};
  for (const auto& [name, v] : dims)
    if (v <= 0)
      return make_error("{}: '{}' must be a positive integer (got {})", r.file(), name, v);
  if (x.head_dim < c.mla.qk_rope_head_dim)
    return make_error("{}: index_head_dim {} is narrower than its rotated part ({})", r.file(),
                      x.head_dim, c.mla.qk_rope_head_dim);
  if (c.mla.q_lora_rank <= 0)
    return make_error(
        "{}: the indexer's queries come from the query latent: 'q_lora_rank' must "
        "be set",
        r.file());
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array() || int64_t(types->size()) != c.num_hidden_layers)
      return r.type_error("layer_types", "a list with one entry per hidden layer");
    for (const json& t : *types)
      if (t != "indexed_attention")
        return make_error(
            "{}: layer type {} is not supported (DeepSeek-V3.2's layers are all "
            "\"indexed_attention\")",
            r.file(), t.dump());
  }
  return parse_mlp_layer_types(r, c);
}

// DeepSeek-V4 (deepseek-v4-family.md §1.3): transformers' keys (layer_types with compress_rates,
// mlp_layer_types, rope_parameters {main, compress}) or the released ones (compress_ratios,
// num_hash_layers, compress_rope_theta with a yarn rope_scaling for the compressed layers).
Status parse_deepseek_v4(const FieldReader& r, ModelConfig& c) {
  DeepseekV4Config& v = c.dsv4;
  v.q_lora_rank = 1024;
  v.o_groups = 8;
  v.o_lora_rank = 1024;
  v.hc_mult = 4;
  KTRY(r.get("q_lora_rank", v.q_lora_rank));
  KTRY(r.get("o_groups", v.o_groups));
  KTRY(r.get("o_lora_rank", v.o_lora_rank));
  KTRY(r.get("hc_mult", v.hc_mult));
  KTRY(r.get("hc_sinkhorn_iters", v.hc_sinkhorn_iters));
  KTRY(r.get("hc_eps", v.hc_eps));
  KTRY(r.get("compress_rope_theta", v.compress_rope_theta));
  const std::pair<const char*, int64_t> dims[] = {{"q_lora_rank", v.q_lora_rank},
                                                  {"o_groups", v.o_groups},
                                                  {"o_lora_rank", v.o_lora_rank},
                                                  {"hc_sinkhorn_iters", v.hc_sinkhorn_iters}};
  for (const auto& [name, value] : dims)
    if (value <= 0)
      return make_error("{}: '{}' must be a positive integer (got {})", r.file(), name, value);
  if (v.hc_mult < 1 || v.hc_mult > 8)
    return make_error("{}: hc_mult {} is not supported (1 to 8 streams)", r.file(), v.hc_mult);
  if (c.num_key_value_heads != 1)
    return make_error("{}: DeepSeek-V4 attends with one shared KV head (num_key_value_heads {})",
                      r.file(), c.num_key_value_heads);
  if (c.num_attention_heads % v.o_groups != 0)
    return make_error("{}: o_groups {} does not divide the {} heads", r.file(), v.o_groups,
                      c.num_attention_heads);

  // Which layers compress: layer_types + compress_rates, or the released compress_ratios.
  const size_t L = size_t(std::max<int64_t>(c.num_hidden_layers, 0));
  v.compress_ratios.assign(L, 0);
  int64_t csa = 4, hca = 128;
  if (const json* rates = r.find("compress_rates")) {
    FieldReader rr(*rates, r.file(), "compress_rates.");
    KTRY(rr.get("compressed_sparse_attention", csa));
    KTRY(rr.get("heavily_compressed_attention", hca));
  }
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array() || types->size() != L)
      return r.type_error("layer_types", "a list with one entry per hidden layer");
    for (size_t i = 0; i < L; ++i) {
      const json& t = (*types)[i];
      if (t == "sliding_attention") continue;
      if (t == "compressed_sparse_attention") {
        v.compress_ratios[i] = int32_t(csa);
      } else if (t == "heavily_compressed_attention") {
        v.compress_ratios[i] = int32_t(hca);
      } else {
        return make_error("{}: layer type {} is not a DeepSeek-V4 one", r.file(), t.dump());
      }
    }
  } else if (const json* ratios = r.find("compress_ratios")) {
    // Released configs list the MTP layers' too: the first num_hidden_layers are the model's.
    if (!ratios->is_array() || ratios->size() < L)
      return r.type_error("compress_ratios", "a list with an entry per hidden layer");
    for (size_t i = 0; i < L; ++i) {
      if (!(*ratios)[i].is_number_integer() || (*ratios)[i].get<int64_t>() < 0)
        return r.type_error("compress_ratios", "a list of non-negative integers");
      v.compress_ratios[i] = (*ratios)[i].get<int32_t>();
    }
  } else {
    return make_error("{}: DeepSeek-V4 needs layer_types or compress_ratios", r.file());
  }

  // Hash-routed layers: mlp_layer_types, or the first num_hash_layers.
  MoeConfig& m = c.moe;
  m.hash_layers.assign(L, false);
  if (const json* types = r.find("mlp_layer_types")) {
    if (!types->is_array() || types->size() != L)
      return r.type_error("mlp_layer_types", "a list with one entry per hidden layer");
    for (size_t i = 0; i < L; ++i) {
      const json& t = (*types)[i];
      if (t != "hash_moe" && t != "moe")
        return r.type_error("mlp_layer_types", "a list of \"hash_moe\" or \"moe\"");
      m.hash_layers[i] = t == "hash_moe";
    }
  } else {
    int64_t hash = 3;
    KTRY(r.get("num_hash_layers", hash));
    for (size_t i = 0; i < L; ++i) m.hash_layers[i] = int64_t(i) < hash;
  }
  m.router = MoeConfig::Router::kSqrtSoftplus;
  m.norm_topk_prob = true;
  m.routed_scaling_factor = 1.5;
  m.num_shared_experts = 1;
  m.swiglu_limit = 10.0;
  KTRY(r.get("n_routed_experts", m.num_experts));
  KTRY(r.get("num_experts_per_tok", m.num_experts_per_tok));
  KTRY(r.get("moe_intermediate_size", m.moe_intermediate_size));
  KTRY(r.get("n_shared_experts", m.num_shared_experts));
  KTRY(r.get("norm_topk_prob", m.norm_topk_prob));
  KTRY(r.get("routed_scaling_factor", m.routed_scaling_factor));
  KTRY(r.get("swiglu_limit", m.swiglu_limit));
  std::string scoring = "sqrtsoftplus", topk_method = "noaux_tc";
  KTRY(r.get("scoring_func", scoring));
  KTRY(r.get("topk_method", topk_method));
  if (scoring != "sqrtsoftplus" || topk_method != "noaux_tc")
    return make_error(
        "{}: router scoring_func '{}' with topk_method '{}' is not supported (DeepSeek-V4's "
        "sqrtsoftplus with noaux_tc is)",
        r.file(), scoring, topk_method);
  if (m.num_shared_experts != 1)
    return make_error("{}: n_shared_experts {} is not supported (DeepSeek-V4 has one)", r.file(),
                      m.num_shared_experts);
  if (!m.norm_topk_prob)
    return make_error("{}: DeepSeek-V4's router renormalises its weights (norm_topk_prob)",
                      r.file());

  // The window: every layer's.
  int64_t window = 128;
  KTRY(r.get("sliding_window", window));
  if (window <= 0 || window > std::numeric_limits<int32_t>::max())
    return make_error("{}: 'sliding_window' must be a positive integer (got {})", r.file(), window);
  c.layer_sliding_window.assign(L, int32_t(window));

  // The rotated width (the last dims of each head), then the two RoPE tables.
  if (r.has("qk_rope_head_dim")) KTRY(r.get("qk_rope_head_dim", c.rope_dim));
  c.rope_interleaved = true;
  if (const json* rope = r.find("rope_parameters"); rope != nullptr && rope->contains("main")) {
    if (!(*rope)["main"].is_object() || !rope->contains("compress") ||
        !(*rope)["compress"].is_object())
      return r.type_error("rope_parameters", "an object with \"main\" and \"compress\" objects");
    ModelConfig main, compress;
    KTRY(parse_rope(FieldReader((*rope)["main"], r.file(), "rope_parameters.main."), main));
    KTRY(parse_rope(FieldReader((*rope)["compress"], r.file(), "rope_parameters.compress."),
                    compress));
    if (main.rope_scaling.type != RopeScalingType::kNone)
      return make_error("{}: rope scaling on DeepSeek-V4's window-only layers is not supported",
                        r.file());
    c.rope_theta = main.rope_theta;
    c.rope_scaling = RopeScaling{};
    v.compress_rope_theta = compress.rope_theta;
    v.compress_rope_scaling = compress.rope_scaling;
  } else {
    // Released form: rope_scaling (yarn) applies to the compressed layers only.
    v.compress_rope_scaling = c.rope_scaling;
    c.rope_scaling = RopeScaling{};
  }
  // Every layer is MoE.
  m.first_k_dense_replace = 0;
  m.mlp_only_layers.clear();
  // RMSNorms multiply in f32 and round once (transformers' Olmo2-style norm), weights as stored.
  c.norm_offset = true;
  c.norm_weights_include_offset = true;
  KTRY(r.get("num_nextn_predict_layers", c.num_nextn_predict_layers));
  return Status::Ok();
}

bool is_hybrid_type(const std::string& t) {
  return t == "qwen3_next" || t == "qwen3_5_text" || t == "qwen3_5_moe_text";
}

// Qwen3-Next and the Qwen3.5 text models (models.md 5, models-wave2.md 1): Gated DeltaNet layers
// with gated full attention every full_attention_interval-th layer (or as layer_types says),
// zero-centred norms, q/k norms, and for the MoE types experts with a gated shared expert.
Status parse_hybrid(const FieldReader& r, ModelConfig& c) {
  LinearAttentionConfig& l = c.linear;
  l.num_value_heads = 32;
  KTRY(r.get("linear_conv_kernel_dim", l.conv_kernel));
  KTRY(r.get("linear_key_head_dim", l.key_head_dim));
  KTRY(r.get("linear_value_head_dim", l.value_head_dim));
  KTRY(r.get("linear_num_key_heads", l.num_key_heads));
  KTRY(r.get("linear_num_value_heads", l.num_value_heads));
  l.fused_projections = c.model_type == "qwen3_next";
  const std::pair<const char*, int64_t> dims[] = {{"linear_conv_kernel_dim", l.conv_kernel},
                                                  {"linear_key_head_dim", l.key_head_dim},
                                                  {"linear_value_head_dim", l.value_head_dim},
                                                  {"linear_num_key_heads", l.num_key_heads},
                                                  {"linear_num_value_heads", l.num_value_heads}};
  for (const auto& [name, v] : dims)
    if (v <= 0)
      return make_error("{}: '{}' must be a positive integer (got {})", r.file(), name, v);
  if (l.conv_kernel < 2)
    return make_error("{}: 'linear_conv_kernel_dim' must be at least 2 (got {})", r.file(),
                      l.conv_kernel);
  if (l.num_value_heads % l.num_key_heads != 0)
    return make_error("{}: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}",
                      r.file(), l.num_value_heads, l.num_key_heads);

  const size_t L = size_t(std::max<int64_t>(c.num_hidden_layers, 0));
  c.layer_linear.assign(L, false);
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array() || types->size() != L)
      return r.type_error("layer_types", "a list with one entry per hidden layer");
    for (size_t i = 0; i < L; ++i) {
      const json& t = (*types)[i];
      if (!t.is_string() || (t != "full_attention" && t != "linear_attention"))
        return r.type_error("layer_types", "a list of \"full_attention\" or \"linear_attention\"");
      c.layer_linear[i] = t == "linear_attention";
    }
  } else {
    int64_t interval = 4;
    KTRY(r.get("full_attention_interval", interval));
    if (interval <= 0)
      return make_error("{}: 'full_attention_interval' must be positive (got {})", r.file(),
                        interval);
    for (size_t i = 0; i < L; ++i) c.layer_linear[i] = (int64_t(i) + 1) % interval != 0;
  }
  c.attn_output_gate = true;
  c.norm_offset = true;
  c.qk_norm = true;
  // MTP layers (mtp.*): the released configs say mtp_num_hidden_layers; vLLM reads Qwen3-Next's
  // as num_nextn_predict_layers.
  KTRY(r.get("num_nextn_predict_layers", c.num_nextn_predict_layers));
  KTRY(r.get("mtp_num_hidden_layers", c.num_nextn_predict_layers));
  if (c.num_nextn_predict_layers < 0)
    return make_error("{}: 'mtp_num_hidden_layers' must not be negative", r.file());

  if (c.model_type == "qwen3_5_text") return Status::Ok();
  MoeConfig& m = c.moe;
  KTRY(r.get("num_experts", m.num_experts));
  KTRY(r.get("num_experts_per_tok", m.num_experts_per_tok));
  KTRY(r.get("moe_intermediate_size", m.moe_intermediate_size));
  KTRY(r.get("shared_expert_intermediate_size", m.shared_expert_intermediate_size));
  if (m.shared_expert_intermediate_size < 0)
    return make_error("{}: 'shared_expert_intermediate_size' must not be negative", r.file());
  if (c.model_type == "qwen3_5_moe_text") {
    m.norm_topk_prob = true;  // Qwen3.5's router always renormalises (no config key)
    return Status::Ok();
  }
  KTRY(r.get("norm_topk_prob", m.norm_topk_prob));
  KTRY(r.get("decoder_sparse_step", m.decoder_sparse_step));
  KTRY(r.get("mlp_only_layers", m.mlp_only_layers));
  return Status::Ok();
}

// A vision-language wrapper (Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration):
// the text model's config is text_config, its tensors sit under model.language_model.; the
// vision tower is not loaded.
const json* text_config_of(const json& j) {
  const auto type = j.find("model_type");
  if (type == j.end() || !type->is_string()) return nullptr;
  if (*type != "qwen3_5" && *type != "qwen3_5_moe") return nullptr;
  const auto text = j.find("text_config");
  return text != j.end() && text->is_object() ? &*text : nullptr;
}

// Gemma3 text (models.md 6). The 5.x rope_parameters per layer type are read by parse_config;
// 4.x files give rope_theta and rope_local_base_freq.
Status parse_gemma3(const FieldReader& r, ModelConfig& c) {
  c.hidden_act = "gelu_pytorch_tanh";
  KTRY(r.get("hidden_activation", c.hidden_act));
  c.query_pre_attn_scalar = 256;
  KTRY(r.get("query_pre_attn_scalar", c.query_pre_attn_scalar));
  KTRY(r.get("final_logit_softcapping", c.final_logit_softcapping));
  double attn_softcap = 0;
  KTRY(r.get("attn_logit_softcapping", attn_softcap));
  if (attn_softcap != 0)
    return make_error("{}: attn_logit_softcapping {} is not supported (Gemma3 releases have none)",
                      r.file(), attn_softcap);
  if (c.rope_local_theta == 0) {
    c.rope_local_theta = 10000.0;
    KTRY(r.get("rope_local_base_freq", c.rope_local_theta));
  }
  c.scale_embeddings = true;
  c.sandwich_norms = true;
  c.norm_offset = true;
  c.qk_norm = true;
  if (!r.has("tie_word_embeddings")) c.tie_word_embeddings = true;
  return Status::Ok();
}

// compressed-tensors' one config group of int8 W8A8 (../shared/docs/reference/specdec-quant.md
// §2.9); anything else is refused naming the field.
Status parse_compressed_tensors(const json& q, const std::string& file, ModelConfig& c) {
  auto refuse = [&](const std::string& what) {
    return make_error(
        "{}: compressed-tensors {} is not supported (int8 W8A8 is: int-quantized, "
        "8-bit symmetric channel or tensor weights, 8-bit token or tensor "
        "activations)",
        file, what);
  };
  const std::string format = q.value("format", std::string());
  if (format != "int-quantized") return refuse("format '" + format + "'");
  bool fp8_kv = false;
  if (q.contains("kv_cache_scheme") && !q["kv_cache_scheme"].is_null()) {
    const json& kv = q["kv_cache_scheme"];
    const std::string strategy = kv.is_object() ? kv.value("strategy", std::string()) : "";
    if (!kv.is_object() || kv.value("num_bits", 0) != 8 ||
        kv.value("type", std::string()) != "float" || kv.value("dynamic", false) ||
        !kv.value("symmetric", true) || (strategy != "tensor" && strategy != "attn_head"))
      return refuse("kv_cache_scheme (" + kv.dump() +
                    "; 8-bit float static symmetric per tensor or attn_head is)");
    fp8_kv = true;
  }
  const json* groups = q.contains("config_groups") ? &q["config_groups"] : nullptr;
  if (groups == nullptr || !groups->is_object() || groups->size() != 1)
    return refuse("config_groups other than one group");
  const json& g = groups->begin().value();
  auto args = [&](const char* key) -> const json* {
    return g.contains(key) && g[key].is_object() ? &g[key] : nullptr;
  };
  const json* w = args("weights");
  const json* a = args("input_activations");
  if (w == nullptr || a == nullptr) return refuse("a group without weights and input_activations");
  auto is8 = [](const json& x) {
    return x.value("num_bits", 0) == 8 && x.value("type", std::string("int")) == "int";
  };
  const std::string ws = w->value("strategy", std::string()),
                    as = a->value("strategy", std::string());
  if (!is8(*w) || !w->value("symmetric", true) || (ws != "channel" && ws != "tensor"))
    return refuse("weights (" + w->dump() + ")");
  if (!is8(*a) || (as != "token" && as != "tensor") ||
      (as == "token") != a->value("dynamic", false) ||
      (as == "token" && !a->value("symmetric", true)))
    return refuse("input_activations (" + a->dump() + ")");
  c.compressed_tensors = {true, as == "token", fp8_kv};
  return Status::Ok();
}

Status parse_quantization(const FieldReader& r, ModelConfig& c, const json& q) {
  std::string method;
  KTRY(r.get("quant_method", method));
  if (method == "compressed-tensors") return parse_compressed_tensors(q, r.file(), c);
  if (method != "fp8")
    return make_error(
        "{}: quantization method '{}' is not supported (fp8 block-quantized and compressed-tensors "
        "int8 are)",
        r.file(), method);
  std::string fmt = "e4m3";
  KTRY(r.get("fmt", fmt));
  if (fmt != "e4m3")
    return make_error("{}: fp8 format '{}' is not supported (e4m3 is)", r.file(), fmt);
  std::vector<int64_t> block;
  KTRY(r.get("weight_block_size", block));
  if (block.size() != 2 || block[0] <= 0 || block[1] <= 0)
    return make_error(
        "{}: fp8 checkpoints need quantization_config.weight_block_size [rows, cols] (per-tensor "
        "fp8 is not supported)",
        r.file());
  c.fp8 = {true, block[0], block[1]};
  return Status::Ok();
}

// Which layers attend through a sliding window, as transformers decides it: layer_types when
// given (a "sliding_attention" layer uses sliding_window), otherwise Qwen2/Qwen3's
// use_sliding_window for layers from max_window_layers on, or Mistral's sliding_window on every
// layer. A null or absent sliding_window (Mistral v0.2+, most Qwen2.5) means full attention.
Status parse_sliding_window(const FieldReader& r, ModelConfig& c) {
  int64_t window = 0;
  KTRY(r.get("sliding_window", window));
  const bool qwen =
      c.model_type == "qwen2" || c.model_type == "qwen3" || c.model_type == "qwen3_moe";
  bool use = c.model_type == "mistral";
  int64_t first_layer = 0;
  if (qwen) {
    KTRY(r.get("use_sliding_window", use));
    KTRY(r.get("max_window_layers", first_layer));
  }
  std::vector<bool> sliding(size_t(std::max<int64_t>(c.num_hidden_layers, 0)), false);
  // Their layer_types name linear or indexed layers, not windows.
  if (is_hybrid_type(c.model_type) || c.model_type == "deepseek_v32" ||
      c.model_type == "deepseek_v4")
    return Status::Ok();
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array() || types->size() != sliding.size())
      return r.type_error("layer_types", "a list with one entry per hidden layer");
    for (size_t i = 0; i < sliding.size(); ++i) {
      const json& t = (*types)[i];
      if (!t.is_string() || (t != "full_attention" && t != "sliding_attention"))
        return r.type_error("layer_types", "a list of \"full_attention\" or \"sliding_attention\"");
      sliding[i] = t == "sliding_attention";
    }
  } else if (c.model_type == "gemma3_text") {
    // transformers' rule without layer_types: every sliding_window_pattern-th layer is full.
    int64_t pattern = 6;
    KTRY(r.get("sliding_window_pattern", pattern));
    if (pattern <= 0)
      return make_error("{}: 'sliding_window_pattern' must be positive (got {})", r.file(),
                        pattern);
    for (size_t i = 0; i < sliding.size(); ++i) sliding[i] = (int64_t(i) + 1) % pattern != 0;
  } else {
    for (size_t i = 0; i < sliding.size(); ++i) sliding[i] = use && int64_t(i) >= first_layer;
  }
  if (qwen && !use) return Status::Ok();  // transformers drops the window then
  if (window == 0) return Status::Ok();
  if (window < 0 || window > std::numeric_limits<int32_t>::max())
    return make_error("{}: 'sliding_window' must be a positive integer (got {})", r.file(), window);
  c.layer_sliding_window.assign(sliding.size(), 0);
  for (size_t i = 0; i < sliding.size(); ++i)
    if (sliding[i]) c.layer_sliding_window[i] = int32_t(window);
  return Status::Ok();
}

Expected<ModelConfig> parse_config(const std::string& text, const std::string& file) {
  KASSIGN(json j, parse_object(text, file));
  std::string prefix = "model.";
  if (const json* tc = text_config_of(j)) {
    json inner = *tc;
    for (const char* key : {"architectures", "tie_word_embeddings", "torch_dtype", "dtype"})
      if (j.contains(key) && !j[key].is_null()) inner[key] = j[key];
    j = std::move(inner);
    prefix = "model.language_model.";
  }
  FieldReader r(j, file);
  ModelConfig c;
  c.weight_prefix = prefix;

  if (const json* arch = r.find("architectures")) {
    if (!arch->is_array()) return r.type_error("architectures", "a list of strings");
    if (!arch->empty()) {
      if (!(*arch)[0].is_string()) return r.type_error("architectures", "a list of strings");
      c.architecture = (*arch)[0].get<std::string>();
    }
  }
  KTRY(r.get("model_type", c.model_type));
  KTRY(r.get("vocab_size", c.vocab_size));
  KTRY(r.get("hidden_size", c.hidden_size));
  KTRY(r.get("intermediate_size", c.intermediate_size));
  KTRY(r.get("num_hidden_layers", c.num_hidden_layers));
  KTRY(r.get("num_attention_heads", c.num_attention_heads));
  KTRY(r.get("num_key_value_heads", c.num_key_value_heads));
  KTRY(r.get("head_dim", c.head_dim));
  KTRY(r.get("max_position_embeddings", c.max_position_embeddings));
  KTRY(r.get("rms_norm_eps", c.rms_norm_eps));
  KTRY(r.get("rope_theta", c.rope_theta));
  KTRY(r.get("attention_bias", c.attention_bias));
  KTRY(r.get("tie_word_embeddings", c.tie_word_embeddings));
  KTRY(r.get("hidden_act", c.hidden_act));
  KTRY(r.get("torch_dtype", c.torch_dtype));
  KTRY(r.get("dtype", c.torch_dtype));  // transformers 5.x name
  KTRY(r.get_ids("eos_token_id", c.eos_token_ids));
  KTRY(r.get("bos_token_id", c.bos_token_id));

  std::optional<double> partial_rotary_factor;
  KTRY(r.get("partial_rotary_factor", partial_rotary_factor));
  // 5.x: rope_parameters replaces rope_theta + rope_scaling.
  const char* rope_key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (const json* rope = r.find(rope_key)) {
    if (!rope->is_object()) return r.type_error(rope_key, "an object");
    if (rope->contains("full_attention")) {
      // Per layer type (Gemma3 in 5.x): the full layers' RoPE, and the sliding layers' base.
      const json& full = (*rope)["full_attention"];
      if (!full.is_object()) return r.type_error(rope_key, "an object per layer type");
      KTRY(parse_rope(FieldReader(full, file, std::string(rope_key) + ".full_attention."), c));
      if (const auto sl = rope->find("sliding_attention"); sl != rope->end()) {
        if (!sl->is_object()) return r.type_error(rope_key, "an object per layer type");
        ModelConfig local;
        KTRY(parse_rope(FieldReader(*sl, file, std::string(rope_key) + ".sliding_attention."),
                        local));
        if (local.rope_scaling.type != RopeScalingType::kNone)
          return make_error("{}: rope scaling on sliding-window layers is not supported", file);
        c.rope_local_theta = local.rope_theta;
      }
    } else {
      FieldReader rr(*rope, file, std::string(rope_key) + ".");
      KTRY(parse_rope(rr, c));
      KTRY(rr.get("partial_rotary_factor", partial_rotary_factor));
    }
  }

  if (c.model_type == "qwen2") c.attention_bias = true;  // hard-coded q/k/v biases
  if (c.model_type == "qwen3") c.qk_norm = true;
  if (c.model_type == "qwen3_moe") KTRY(parse_qwen3_moe(r, c));
  if (c.model_type == "deepseek_v3") {
    KTRY(parse_deepseek_v3(r, c));
    KTRY(parse_mlp_layer_types(r, c));
  }
  if (c.model_type == "deepseek_v32") KTRY(parse_deepseek_v32(r, c));
  if (c.model_type == "deepseek_v4") KTRY(parse_deepseek_v4(r, c));
  if (c.model_type == "gemma3_text") KTRY(parse_gemma3(r, c));
  if (is_hybrid_type(c.model_type)) {
    KTRY(parse_hybrid(r, c));
    if (!partial_rotary_factor) partial_rotary_factor = 0.25;  // transformers' default here
  }
  KTRY(parse_sliding_window(r, c));
  if (const json* q = r.find("quantization_config")) {
    if (!q->is_object()) return r.type_error("quantization_config", "an object");
    KTRY(parse_quantization(FieldReader(*q, file, "quantization_config."), c, *q));
  }

  if (partial_rotary_factor) {
    const double f = *partial_rotary_factor;
    if (!(f > 0.0 && f <= 1.0))
      return make_error("{}: 'partial_rotary_factor' must be in (0, 1], got {}", file, f);
    int64_t hd = c.head_dim;
    if (hd == 0 && c.num_attention_heads > 0) hd = c.hidden_size / c.num_attention_heads;
    c.rope_dim = int64_t(double(hd) * f);
  }
  Status st = c.finalize();
  if (!st.ok()) return make_error("{}: {}", file, st.message());
  return c;
}

Expected<GenerationDefaults> parse_generation(const std::string& text, const std::string& file) {
  KASSIGN(json j, parse_object(text, file));
  FieldReader r(j, file);
  GenerationDefaults g;
  KTRY(r.get_ids("eos_token_id", g.eos_token_ids));
  KTRY(r.get("temperature", g.temperature));
  KTRY(r.get("top_p", g.top_p));
  KTRY(r.get("top_k", g.top_k));
  KTRY(r.get("min_p", g.min_p));
  KTRY(r.get("repetition_penalty", g.repetition_penalty));
  KTRY(r.get("max_new_tokens", g.max_new_tokens));
  return g;
}

}  // namespace

int32_t ModelConfig::sliding_window(int64_t layer) const {
  return layer >= 0 && size_t(layer) < layer_sliding_window.size()
             ? layer_sliding_window[size_t(layer)]
             : 0;
}

bool MoeConfig::is_moe_layer(int64_t layer) const {
  if (num_experts <= 0 || layer < first_k_dense_replace) return false;
  for (int64_t l : mlp_only_layers)
    if (l == layer) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

Status ModelConfig::finalize() {
  // Models whose every layer is MoE (Qwen3.5-MoE) have no dense width.
  bool any_dense = false;
  for (int64_t l = 0; l < num_hidden_layers; ++l) any_dense = any_dense || !moe.is_moe_layer(l);
  const std::pair<const char*, int64_t> required[] = {
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", any_dense ? intermediate_size : 1},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"max_position_embeddings", max_position_embeddings},
  };
  for (const auto& [name, value] : required)
    if (value <= 0) return make_error("'{}' must be a positive integer (got {})", name, value);

  if (num_key_value_heads < 0)
    return make_error("'num_key_value_heads' must be positive (got {})", num_key_value_heads);
  if (num_key_value_heads == 0) num_key_value_heads = num_attention_heads;
  if (num_attention_heads % num_key_value_heads != 0)
    return make_error("num_attention_heads {} is not a multiple of num_key_value_heads {}",
                      num_attention_heads, num_key_value_heads);

  if (head_dim < 0) return make_error("'head_dim' must be positive (got {})", head_dim);
  if (head_dim == 0) {
    if (hidden_size % num_attention_heads != 0)
      return make_error("hidden_size {} is not divisible by num_attention_heads {} (set head_dim)",
                        hidden_size, num_attention_heads);
    head_dim = hidden_size / num_attention_heads;
  }
  if (rope_dim == 0) rope_dim = head_dim;
  if (rope_dim < 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    return make_error("rotary width {} must be even and within head_dim {}", rope_dim, head_dim);

  if (!(rms_norm_eps > 0.0 && std::isfinite(rms_norm_eps)))
    return make_error("'rms_norm_eps' must be positive (got {})", rms_norm_eps);
  if (!(rope_theta > 0.0 && std::isfinite(rope_theta)))
    return make_error("'rope_theta' must be positive (got {})", rope_theta);
  if (hidden_act != "silu" && hidden_act != "gelu_pytorch_tanh")
    return make_error("unsupported hidden_act '{}' (silu and gelu_pytorch_tanh are supported)",
                      hidden_act);
  if (query_pre_attn_scalar < 0 || final_logit_softcapping < 0 || rope_local_theta < 0)
    return make_error(
        "query_pre_attn_scalar, final_logit_softcapping and the local RoPE base must "
        "not be negative");

  if (linear.enabled()) {
    if (mla.enabled() || !layer_sliding_window.empty())
      return make_error("linear-attention layers with MLA or sliding windows are not supported");
    if (std::find(layer_linear.begin(), layer_linear.end(), false) == layer_linear.end())
      return make_error("every layer is a linear-attention layer; at least one must attend");
  }
  if (indexer.enabled() && !mla.enabled())
    return make_error(
        "a sparse-attention indexer without multi-head latent attention is not "
        "supported");
  if (!layer_sliding_window.empty() && mla.enabled())
    return make_error("sliding-window attention with multi-head latent attention is not supported");

  if (moe.num_experts > 0) {
    const MoeConfig& m = moe;
    if (m.num_experts_per_tok <= 0 || m.num_experts_per_tok > m.num_experts)
      return make_error("num_experts_per_tok {} must be in [1, {}]", m.num_experts_per_tok,
                        m.num_experts);
    if (m.moe_intermediate_size <= 0)
      return make_error("'moe_intermediate_size' must be a positive integer (got {})",
                        m.moe_intermediate_size);
    if (m.decoder_sparse_step <= 0)
      return make_error("'decoder_sparse_step' must be positive (got {})", m.decoder_sparse_step);
    if (m.num_shared_experts < 0)
      return make_error("'n_shared_experts' must not be negative (got {})", m.num_shared_experts);
    if (m.router == MoeConfig::Router::kGroupedSigmoid) {
      if (m.n_group <= 0 || m.num_experts % m.n_group != 0 || m.num_experts / m.n_group < 2)
        return make_error("n_group {} must divide n_routed_experts {} into groups of 2 or more",
                          m.n_group, m.num_experts);
      if (m.topk_group <= 0 || m.topk_group > m.n_group)
        return make_error("topk_group {} must be in [1, n_group {}]", m.topk_group, m.n_group);
      if (m.num_experts_per_tok > m.topk_group * (m.num_experts / m.n_group))
        return make_error("num_experts_per_tok {} exceeds the {} experts of {} kept groups",
                          m.num_experts_per_tok, m.topk_group * (m.num_experts / m.n_group),
                          m.topk_group);
    }
  }

  const RopeScaling& s = rope_scaling;
  if (s.type != RopeScalingType::kNone) {
    if (!(s.factor > 0.0 && std::isfinite(s.factor)))
      return make_error("rope scaling factor must be positive (got {})", s.factor);
    if (s.original_max_position_embeddings < 0)
      return make_error("rope scaling original_max_position_embeddings must not be negative");
  }
  // The llama3 ramp divides by (high_freq_factor - low_freq_factor).
  if (s.type == RopeScalingType::kLlama3 && !(s.high_freq_factor > s.low_freq_factor))
    return make_error("llama3 rope scaling needs high_freq_factor {} > low_freq_factor {}",
                      s.high_freq_factor, s.low_freq_factor);
  return Status::Ok();
}

Expected<ModelConfig> parse_config_json(const std::string& text) {
  return parse_config(text, "config.json");
}

Expected<ModelConfig> load_config_json(const std::string& path) {
  KASSIGN(std::string text, read_text_file(path));
  return parse_config(text, path);
}

Expected<GenerationDefaults> parse_generation_config_json(const std::string& text) {
  return parse_generation(text, "generation_config.json");
}

}  // namespace kestrel
