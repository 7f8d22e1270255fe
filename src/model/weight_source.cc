#include "model/weight_source.h"

#include <map>
#include <random>
#include <regex>

#include "base/fp16.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/kv_scales.h"
#include "tensor/quant_formats.h"

namespace kestrel {
namespace {

Status check_shape(const std::string& name, const Tensor& t, const Shape& expected,
                   const std::string& where) {
  if (t.shape == expected) return Status::Ok();
  return make_error("tensor '{}' in {} has shape {}, expected {}", name, where, t.shape.str(),
                    expected.str());
}

class SafetensorsSource final : public WeightSource {
 public:
  SafetensorsSource(std::unique_ptr<SafetensorsCheckpoint> ckpt, std::string dir)
      : ckpt_(std::move(ckpt)), dir_(std::move(dir)) {}
  bool has(const std::string& n) const override { return ckpt_->contains(n); }
  Expected<Tensor> get(const std::string& n, const Shape& expected) override {
    KASSIGN(Tensor t, ckpt_->tensor(n));
    KTRY(check_shape(n, t, expected, dir_));
    return t;
  }
  std::string describe() const override { return "safetensors checkpoint " + dir_; }

 private:
  std::unique_ptr<SafetensorsCheckpoint> ckpt_;
  std::string dir_;
};

class GgufSource final : public WeightSource {
 public:
  GgufSource(const GgufFile& g, std::string path)
      : gguf_(g),
        path_(std::move(path)),
        arch_(g.get_string("general.architecture").value_or("")) {}
  bool has(const std::string& n) const override {
    const std::string g = gguf_name_for(n, arch_);
    return !g.empty() && gguf_.find_tensor(g) != nullptr;
  }
  Expected<Tensor> get(const std::string& n, const Shape& expected) override {
    const std::string g = gguf_name_for(n, arch_);
    if (g.empty()) return make_error("no GGUF name for tensor '{}'", n);
    KASSIGN(Tensor t, gguf_.tensor(g));
    KTRY(check_shape(g, t, expected, path_));
    return t;
  }
  std::optional<std::vector<float>> rope_freq_divisors() const override {
    auto t = gguf_.tensor("rope_freqs.weight");
    if (!t.ok()) return std::nullopt;
    std::vector<float> out(t->numel());
    dequantize_row(t->dtype, t->data, out.data(), t->numel());
    return out;
  }
  std::string describe() const override { return "GGUF file " + path_; }

 private:
  const GgufFile& gguf_;
  std::string path_;
  std::string arch_;
};

class DummySource final : public WeightSource {
 public:
  DummySource(DType dtype, uint64_t seed, bool attention_bias)
      : dtype_(dtype), rng_(seed), attention_bias_(attention_bias) {}
  // Every tensor exists, in the per-expert layout: not the fused expert tensors some checkpoints
  // store instead, which a rank holding some of the experts would otherwise generate whole; and
  // biases only where the config declares them (q/k/v with attention_bias), as a float
  // checkpoint of the architecture has them.
  bool has(const std::string& n) const override {
    if (n.ends_with(".bias"))
      return attention_bias_ && (n.ends_with("q_proj.bias") || n.ends_with("k_proj.bias") ||
                                 n.ends_with("v_proj.bias"));
    return !n.ends_with("experts.gate_up_proj") && !n.ends_with("experts.down_proj") &&
           !is_kv_scale_tensor(n);
  }
  Expected<Tensor> get(const std::string& n, const Shape& expected) override {
    HostBuffer& buf = buffers_.emplace_back(dtype_, expected);
    const bool is_norm = n.find("norm") != std::string::npos;
    std::uniform_real_distribution<float> dist(-0.02f, 0.02f);
    const int64_t count = expected.numel();
    for (int64_t i = 0; i < count; ++i) {
      const float v = is_norm ? 1.0f + dist(rng_) : dist(rng_);
      switch (dtype_) {
        case DType::F32:
          buf.as<float>()[i] = v;
          break;
        case DType::F16:
          buf.as<uint16_t>()[i] = f32_to_f16(v);
          break;
        default:
          buf.as<uint16_t>()[i] = f32_to_bf16(v);
          break;
      }
    }
    return buf.view();
  }
  std::string describe() const override {
    return fmt::format("dummy weights ({})", dtype_name(dtype_));
  }

 private:
  DType dtype_;
  std::mt19937_64 rng_;
  bool attention_bias_;
  std::vector<HostBuffer> buffers_;
};

}  // namespace

std::string gguf_name_for(const std::string& hf, const std::string& arch) {
  static const std::map<std::string, std::string> kTop = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  static const std::map<std::string, std::string> kLayer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  // Gemma3's four norms per block: its post_attention_layernorm norms the attention output, and
  // the FFN's input norm is pre_feedforward_layernorm.
  static const std::map<std::string, std::string> kGemma3Layer = {
      {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
  };
  if (auto it = kTop.find(hf); it != kTop.end()) return it->second;
  static const std::regex kLayerRe(R"(model\.layers\.(\d+)\.(.+))");
  std::smatch m;
  if (std::regex_match(hf, m, kLayerRe)) {
    const std::string name = m[2].str();
    if (arch == "gemma3")
      if (auto it = kGemma3Layer.find(name); it != kGemma3Layer.end())
        return "blk." + m[1].str() + "." + it->second;
    if (auto it = kLayer.find(name); it != kLayer.end())
      return "blk." + m[1].str() + "." + it->second;
  }
  return {};
}

std::unique_ptr<WeightSource> make_safetensors_source(std::unique_ptr<SafetensorsCheckpoint> ckpt,
                                                      std::string dir) {
  return std::make_unique<SafetensorsSource>(std::move(ckpt), std::move(dir));
}
std::unique_ptr<WeightSource> make_gguf_source(const GgufFile& gguf, std::string path) {
  return std::make_unique<GgufSource>(gguf, std::move(path));
}
std::unique_ptr<WeightSource> make_dummy_source(DType dtype, uint64_t seed, bool attention_bias) {
  return std::make_unique<DummySource>(dtype, seed, attention_bias);
}

namespace {

class AliasedSource final : public WeightSource {
 public:
  AliasedSource(WeightSource& inner,
                std::function<std::vector<std::string>(const std::string&)> aliases)
      : inner_(inner), aliases_(std::move(aliases)) {}
  bool has(const std::string& name) const override { return !resolve(name).empty(); }
  Expected<Tensor> get(const std::string& name, const Shape& expected) override {
    const std::string found = resolve(name);
    return inner_.get(found.empty() ? name : found, expected);
  }
  std::optional<std::vector<float>> rope_freq_divisors() const override {
    return inner_.rope_freq_divisors();
  }
  std::string describe() const override { return inner_.describe(); }

 private:
  // The name inner holds the tensor under, or "" when it has none of them.
  std::string resolve(const std::string& name) const {
    if (inner_.has(name)) return name;
    for (const std::string& a : aliases_(name))
      if (inner_.has(a)) return a;
    return "";
  }

  WeightSource& inner_;
  std::function<std::vector<std::string>(const std::string&)> aliases_;
};

}  // namespace

std::unique_ptr<WeightSource> make_aliased_source(
    WeightSource& inner, std::function<std::vector<std::string>(const std::string&)> aliases) {
  return std::make_unique<AliasedSource>(inner, std::move(aliases));
}

}  // namespace kestrel
