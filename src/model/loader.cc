#include "model/loader.h"

#include <filesystem>

#include "base/logging.h"
#include "base/mmap_file.h"
#include "formats/safetensors.h"
#include "model/arch/registry.h"
#include "model/modelslim.h"

namespace kestrel {
namespace fs = std::filesystem;

namespace {

bool is_gguf_path(const std::string& p) {
  return p.size() > 5 && p.compare(p.size() - 5, 5, ".gguf") == 0;
}

// --dtype as vLLM reads it: "auto" takes the checkpoint's torch_dtype (f32 when it declares
// none, as GGUF files do).
Expected<DType> model_dtype(const LoadOptions& o, const ModelConfig& cfg) {
  const std::string d = o.dtype == "auto" ? cfg.torch_dtype : o.dtype;
  if (d.empty() || d == "auto") return DType::F32;
  if (d == "bfloat16" || d == "bf16") return DType::BF16;
  if (d == "float32" || d == "float" || d == "fp32") return DType::F32;
  if (d == "float16" || d == "half" || d == "fp16") return DType::F16;
  return make_error("unsupported --dtype '{}' (use auto, float32, bfloat16 or float16)", d);
}

// The cache's element type as --kv-cache-dtype names it; nullopt for auto.
Expected<std::optional<DType>> named_kv_dtype(const std::string& d) {
  if (d == "auto") return std::optional<DType>();
  if (d == "float32" || d == "fp32") return std::optional(DType::F32);
  if (d == "bfloat16" || d == "bf16") return std::optional(DType::BF16);
  if (d == "float16" || d == "fp16") return std::optional(DType::F16);
  if (d == "fp8" || d == "fp8_e4m3") return std::optional(DType::F8_E4M3);
  if (d == "fp8_e5m2") return std::optional(DType::F8_E5M2);
  if (d == "mxfp8") return std::optional(DType::MXFP8);
  if (d == "int8") return std::optional(DType::I8);
  return make_error(
      "unsupported --kv-cache-dtype '{}' (use auto, fp32, bf16, fp16, fp8, fp8_e4m3, fp8_e5m2, "
      "mxfp8 or int8)",
      d);
}

// --kv-cache-dtype against the checkpoint: msModelSlim's kv_cache_type says which static scales
// it carries (C8: int8 with scales and offsets; the MXFP8 marker: V's E8M0 scales).
Expected<KvCacheQuant> kv_cache_quant(const LoadOptions& o, DType act, bool gguf,
                                      const ModelConfig& c) {
  const std::string marker = c.modelslim ? c.modelslim->kv_cache_type : "";
  const bool c8 = marker == kModelSlimC8, mx_v = marker == kModelSlimMxfp8Kv;
  KASSIGN(const std::optional<DType> named, named_kv_dtype(o.kv_cache_dtype));
  KvCacheQuant q;
  q.dtype = named ? *named : c8 ? DType::I8 : gguf && act == DType::F32 ? DType::F16 : act;
  const std::string flag = "--kv-cache-dtype " + o.kv_cache_dtype;
  if (q.dtype == DType::I8 && !c8)
    return make_error(
        "{}: an int8 cache takes its static scales from an msModelSlim C8 checkpoint "
        "(kv_cache_type C8); '{}' has none (use fp8 for a scaled 8-bit cache)",
        flag, o.model);
  if (c8 && (q.dtype == DType::F8_E4M3 || q.dtype == DType::F8_E5M2 || q.dtype == DType::MXFP8))
    return make_error(
        "{}: '{}' is a C8 checkpoint, whose KV scales are int8 ones; serve it with "
        "--kv-cache-dtype auto (int8) or a float cache",
        flag, o.model);
  if (c.mla.enabled() && (q.dtype == DType::I8 || q.dtype == DType::MXFP8))
    return make_error(
        "{}: an MLA model's latent cache is one row per token with a per-tensor scale; it "
        "takes fp8, fp8_e4m3 or fp8_e5m2, not {}",
        flag, q.dtype == DType::I8 ? "C8 int8" : "mxfp8");
  if (c.indexer.enabled() && quantized_kv_cache(q.dtype))
    return make_error(
        "{}: DeepSeek-V3.2's indexer keys share the latent rows, and their 8-bit format (FP8 "
        "codes with a per-token scale) is not built yet; use auto, bf16, fp16 or fp32",
        flag);
  if (q.dtype == DType::MXFP8 && c.head_dim % 32 != 0)
    return make_error("{}: head_dim {} is not a multiple of MXFP8's 32-value scale groups", flag,
                      c.head_dim);
  if (o.calculate_kv_scales) {
    if (q.dtype == DType::I8 || q.dtype == DType::MXFP8)
      return make_error(
          "--calculate-kv-scales: the {} cache's scales are the checkpoint's (or each row's); "
          "only fp8 caches calculate theirs",
          dtype_name(q.dtype));
    q.calculate_scales = q.dtype == DType::F8_E4M3 || q.dtype == DType::F8_E5M2;
    if (!q.calculate_scales)
      KLOG_INFO("--calculate-kv-scales: a {} cache has no scales; the flag does nothing",
                dtype_name(q.dtype));
  }
  q.static_v_scales = mx_v && q.dtype == DType::MXFP8;
  if ((c8 && q.dtype != DType::I8) || (mx_v && !q.static_v_scales))
    KLOG_INFO("the checkpoint's {} KV scales are not used by a {} cache", marker,
              dtype_name(q.dtype));
  // As vLLM: a compressed-tensors kv_cache_scheme's scales serve --kv-cache-dtype fp8; auto keeps
  // the model's dtype.
  if (c.compressed_tensors.fp8_kv_scales && q.dtype != DType::F8_E4M3 && q.dtype != DType::F8_E5M2)
    KLOG_INFO(
        "the checkpoint's kv_cache_scheme (FP8 k_scale/v_scale) is not used by a {} cache; "
        "--kv-cache-dtype fp8 uses it",
        dtype_name(q.dtype));
  return q;
}

Status load_generation_defaults(const std::string& dir, LoadedModel& lm) {
  const fs::path p = fs::path(dir) / "generation_config.json";
  if (!fs::exists(p)) return Status::Ok();
  KASSIGN(std::string text, read_text_file(p.string()));
  KASSIGN(lm.generation, parse_generation_config_json(text));
  return Status::Ok();
}

// --quantization against the checkpoint: an msModelSlim one (its description file) is served
// as vLLM-Ascend's `ascend` method, with or without the flag; the flag without the file is an
// error, as there.
Status read_quantization(const LoadOptions& o, bool no_checkpoint_dir, ModelConfig& c) {
  std::optional<ModelSlimDescription> desc;
  if (!no_checkpoint_dir) {
    KASSIGN(desc, read_modelslim_description(o.model));
  }
  if (o.quantization == "ascend" && !desc)
    return make_error(
        "--quantization ascend: '{}' has no {} (msModelSlim's description of the quantized "
        "tensors)",
        o.model, kModelSlimDescriptionFile);
  if (!desc) return Status::Ok();
  if (!o.quantization.empty() && o.quantization != "ascend")
    return make_error(
        "--quantization {}: '{}' is an msModelSlim checkpoint ({}); serve it with --quantization "
        "ascend, or without the flag",
        o.quantization, o.model, kModelSlimDescriptionFile);
  KTRY(check_modelslim(*desc));
  KLOG_INFO("msModelSlim checkpoint ({}{}, {} tensors described): --quantization ascend{}",
            desc->model_quant_type.empty() ? "no model_quant_type" : desc->model_quant_type,
            desc->version.empty() ? "" : ", version " + desc->version, desc->types.size(),
            o.quantization.empty() ? " (implied)" : "");
  if (desc->quarot)
    KLOG_INFO("QuaRot: its rotations are folded into the weights, nothing is applied at inference");
  desc->mix_static = o.pd_decode;
  if (desc->model_quant_type == "W8A8_MIX")
    KLOG_INFO("W8A8_MIX layers run {} activations ({})",
              o.pd_decode ? "static W8A8" : "per-token W8A8_DYNAMIC",
              o.pd_decode ? "a PD decode instance" : "not a PD decode instance");
  c.modelslim = std::make_shared<const ModelSlimDescription>(std::move(*desc));
  return Status::Ok();
}

}  // namespace

Expected<ModelConfig> read_model_config(const std::string& model, const std::string& load_format) {
  ModelConfig c;
  if (is_gguf_path(model) || load_format == "gguf") {
    KASSIGN(auto gguf, GgufFile::open(model));
    KASSIGN(c, config_from_gguf(*gguf));
  } else {
    KASSIGN(c, load_config_json((fs::path(model) / "config.json").string()));
  }
  KTRY(c.finalize());
  return c;
}

Expected<std::unique_ptr<LoadedModel>> load_model(const LoadOptions& o) {
  auto lm = std::make_unique<LoadedModel>();
  lm->path = o.model;
  if (!fs::exists(o.model)) return make_error("model path '{}' does not exist", o.model);
  const bool gguf = is_gguf_path(o.model) || (o.load_format == "gguf");
  const bool dummy = o.load_format == "dummy";
  if (o.load_format != "auto" && o.load_format != "safetensors" && o.load_format != "gguf" &&
      !dummy) {
    return make_error("unsupported --load-format '{}' (use auto, safetensors, gguf or dummy)",
                      o.load_format);
  }

  if (gguf) {
    if (fs::is_directory(o.model)) return make_error("--load-format gguf needs a .gguf file");
    KASSIGN(lm->gguf, GgufFile::open(o.model));
    KASSIGN(lm->config, config_from_gguf(*lm->gguf));
  } else {
    if (!fs::is_directory(o.model))
      return make_error("'{}' is neither a model directory nor a .gguf file", o.model);
    KASSIGN(lm->config, load_config_json((fs::path(o.model) / "config.json").string()));
    KTRY(load_generation_defaults(o.model, *lm));
  }
  KTRY(lm->config.finalize());
  if (lm->generation.eos_token_ids.empty()) lm->generation.eos_token_ids = lm->config.eos_token_ids;

  KTRY(check_architecture(lm->config));

  KTRY(read_quantization(o, gguf || dummy, lm->config));
  KASSIGN(const DType act_dtype, model_dtype(o, lm->config));
  KASSIGN(const KvCacheQuant kv, kv_cache_quant(o, act_dtype, gguf, lm->config));
  if (dummy) {
    // Dummy weights default to bf16, the dtype big checkpoints ship in.
    const DType wt =
        (o.dtype == "auto" && lm->config.torch_dtype.empty()) ? DType::BF16 : act_dtype;
    lm->weights = make_dummy_source(wt, o.seed, lm->config.attention_bias);
  } else if (gguf) {
    lm->weights = make_gguf_source(*lm->gguf, o.model);
  } else {
    KASSIGN(auto ckpt, SafetensorsCheckpoint::open_dir(o.model));
    lm->weights = make_safetensors_source(std::move(ckpt), o.model);
  }
  QuantCompute qc = QuantCompute::kInt8;
  if (o.quant_compute == "f32") {
    qc = QuantCompute::kF32;
  } else if (o.quant_compute != "int8") {
    return make_error("unsupported --quant-compute '{}' (use int8 or f32)", o.quant_compute);
  }
  if (o.shared_backend == nullptr) lm->backend = make_cpu_backend(o.threads, qc, o.pin_threads);
  Backend& backend = o.shared_backend != nullptr ? *o.shared_backend : *lm->backend;
  TensorParallel tp;
  const DataParallelPlace dp{o.dp_rank, o.dp_size};
  const bool ep =
      o.expert_parallel && lm->config.moe.num_experts > 0 && (o.tp_size > 1 || o.dp_size > 1);
  if (o.tp_size > 1 || ep) {
    tp.expert_parallel = ep;
    KASSIGN(tp.shard,
            plan_tp_shard(lm->config, o.tp_rank, o.tp_size, ep, ep ? dp : DataParallelPlace{}));
    tp.comm = o.tp_comm;
    tp.ep_comm = o.ep_comm;
    if (ep && o.dp_size > 1 && o.ep_comm == nullptr)
      return make_error(
          "expert parallelism over {} data-parallel ranks: rank {} has no communicator", o.dp_size,
          o.dp_rank);
  }
  KASSIGN(lm->model, build_model(lm->config, act_dtype, kv, *lm->weights, backend, tp));
  KLOG_INFO("loaded {} ({}) from {} on {}, {} activations, {} KV cache", lm->config.architecture,
            lm->config.model_type, lm->weights->describe(), backend.name(), dtype_name(act_dtype),
            dtype_name(kv.dtype));
  return lm;
}

}  // namespace kestrel
