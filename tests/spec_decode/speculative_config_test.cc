#include "spec_decode/speculative_config.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace kestrel {
namespace {

// The config parsed from `text`; fails the test when the text is refused or means "off".
SpeculativeConfig parsed(std::string_view text) {
  auto r = parse_speculative_config(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.error().message;
  if (!r.ok() || !r->has_value()) {
    ADD_FAILURE() << text << ": no config";
    return {};
  }
  return **r;
}

// True when `text` parses to "speculative decoding off".
bool off(std::string_view text) {
  auto r = parse_speculative_config(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.error().message;
  return r.ok() && !r->has_value();
}

// The error message for `text` (empty, with a test failure, when it is accepted).
std::string refused(std::string_view text) {
  auto r = parse_speculative_config(text);
  EXPECT_FALSE(r.ok()) << text << " was accepted";
  if (r.ok()) return "";
  const std::string& m = r.error().message;
  EXPECT_TRUE(m.starts_with("--speculative-config")) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  return m;
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(SpeculativeConfig, MethodNames) {
  EXPECT_STREQ(speculative_method_name(SpeculativeMethod::kNgram), "ngram");
  EXPECT_STREQ(speculative_method_name(SpeculativeMethod::kDraftModel), "draft_model");
  EXPECT_STREQ(speculative_method_name(SpeculativeMethod::kMtp), "mtp");
}

TEST(SpeculativeConfig, EmptyAndNeutralTextsMeanOff) {
  EXPECT_TRUE(off(""));
  EXPECT_TRUE(off("{}"));
  EXPECT_TRUE(off(R"({"num_speculative_tokens":0})"));
  EXPECT_TRUE(off(R"({"num_speculative_tokens":null,"enforce_eager":true})"));
  EXPECT_TRUE(off(R"({"prompt_lookup_min":3})"));
  // k == 0 turns any method off, even one Kestrel does not run.
  EXPECT_TRUE(off(R"({"method":"ngram","num_speculative_tokens":0})"));
  EXPECT_TRUE(off(R"({"method":"mtp","num_speculative_tokens":0})"));
  EXPECT_TRUE(off(R"({"method":"dspark","num_speculative_tokens":0})"));
}

TEST(SpeculativeConfig, NotAJsonObject) {
  EXPECT_HAS(refused(R"({"method": mtp})"),
             "--speculative-config: not a JSON object: parse error at line 1");
  EXPECT_EQ(refused("[1]"), "--speculative-config: not a JSON object: found array");
  EXPECT_EQ(refused("3"), "--speculative-config: not a JSON object: found number");
}

TEST(SpeculativeConfig, UnknownKeysAreRefused) {
  EXPECT_EQ(refused(R"({"method":"ngram","num_speculative_tokens":3,"bogus":1})"),
            "--speculative-config: unknown key 'bogus'");
  EXPECT_EQ(refused(R"({"speculative_model":"/draft","num_speculative_tokens":3})"),
            "--speculative-config: unknown key 'speculative_model'");
  EXPECT_EQ(refused(R"({"num_speculative_tokens":0,"disable_padded_drafter_batch":true})"),
            "--speculative-config: unknown key 'disable_padded_drafter_batch'");
}

TEST(SpeculativeConfig, WrongTypesAreRefused) {
  EXPECT_EQ(refused(R"({"method":3})"), "--speculative-config: 'method' must be a string");
  EXPECT_EQ(refused(R"({"method":"ngram","num_speculative_tokens":"3"})"),
            "--speculative-config: 'num_speculative_tokens' must be a non-negative integer");
  EXPECT_EQ(refused(R"({"method":"ngram","num_speculative_tokens":-1})"),
            "--speculative-config: 'num_speculative_tokens' must be a non-negative integer");
  EXPECT_EQ(refused(R"({"method":"ngram","num_speculative_tokens":2.5})"),
            "--speculative-config: 'num_speculative_tokens' must be a non-negative integer");
  EXPECT_EQ(refused(R"({"method":"mtp","enforce_eager":"yes"})"),
            "--speculative-config: 'enforce_eager' must be true or false");
  EXPECT_EQ(refused(R"({"method":"draft_model","model":7,"num_speculative_tokens":3})"),
            "--speculative-config: 'model' must be a string");
  EXPECT_EQ(refused(R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":0})"),
            "--speculative-config: 'prompt_lookup_min' must be an integer >= 1");
  EXPECT_EQ(refused(R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":0})"),
            "--speculative-config: 'prompt_lookup_max' must be an integer >= 1");
  EXPECT_EQ(refused(R"({"method":"ngram","num_speculative_tokens":3,"disable_by_batch_size":0})"),
            "--speculative-config: 'disable_by_batch_size' must be an integer >= 1");
  EXPECT_EQ(refused(R"({"method":"mtp","max_model_len":0})"),
            "--speculative-config: 'max_model_len' must be an integer >= 1");
  EXPECT_EQ(refused(R"({"method":"mtp","draft_sample_method":1})"),
            "--speculative-config: 'draft_sample_method' must be a string");
}

TEST(SpeculativeConfig, GuidesMtpConfigs) {
  // DeepSeek-V3.1 guide.
  SpeculativeConfig c = parsed(R"({"num_speculative_tokens": 3, "method": "mtp"})");
  EXPECT_EQ(c.method, SpeculativeMethod::kMtp);
  EXPECT_EQ(c.method_alias, "mtp");
  EXPECT_EQ(c.num_speculative_tokens, 3);
  EXPECT_EQ(c.k(), 3);
  EXPECT_EQ(c.num_lookahead_tokens(), 3);
  EXPECT_FALSE(c.enforce_eager);
  EXPECT_TRUE(c.draft_model.empty());

  // Qwen3.5 guide: an alias, and enforce_eager (no effect).
  c = parsed(R"({"method": "qwen3_5_mtp", "num_speculative_tokens": 3, "enforce_eager": true})");
  EXPECT_EQ(c.method, SpeculativeMethod::kMtp);
  EXPECT_EQ(c.method_alias, "qwen3_5_mtp");
  EXPECT_EQ(c.num_speculative_tokens, 3);
  EXPECT_TRUE(c.enforce_eager);
}

TEST(SpeculativeConfig, MtpAliasesBecomeMtp) {
  for (const char* alias : {"mtp", "deepseek_mtp", "qwen3_next_mtp", "qwen3_5_mtp", "glm4_moe_mtp",
                            "ernie_mtp", "mimo_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp"}) {
    const SpeculativeConfig c =
        parsed(std::string(R"({"method":")") + alias + R"(","num_speculative_tokens":1})");
    EXPECT_EQ(c.method, SpeculativeMethod::kMtp) << alias;
    EXPECT_EQ(c.method_alias, alias);
  }
}

TEST(SpeculativeConfig, MtpKIsOptionalUntilResolved) {
  const SpeculativeConfig c = parsed(R"({"method":"deepseek_mtp"})");
  EXPECT_EQ(c.method, SpeculativeMethod::kMtp);
  EXPECT_FALSE(c.num_speculative_tokens.has_value());
  EXPECT_EQ(c.k(), 0);
  // "model" is accepted for mtp (vLLM: the target itself) and ignored.
  EXPECT_TRUE(parsed(R"({"method":"mtp","model":"/weights/ds3"})").draft_model.empty());
}

TEST(SpeculativeConfig, Ngram) {
  SpeculativeConfig c = parsed(R"({"method":"ngram","num_speculative_tokens":4})");
  EXPECT_EQ(c.method, SpeculativeMethod::kNgram);
  EXPECT_EQ(c.method_alias, "ngram");
  EXPECT_EQ(c.k(), 4);
  EXPECT_EQ(c.num_lookahead_tokens(), 0);
  EXPECT_EQ(c.prompt_lookup_min, 5);
  EXPECT_EQ(c.prompt_lookup_max, 5);
  EXPECT_FALSE(c.disable_by_batch_size.has_value());

  c = parsed(
      R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":2,"prompt_lookup_max":4,
          "disable_by_batch_size":8})");
  EXPECT_EQ(c.prompt_lookup_min, 2);
  EXPECT_EQ(c.prompt_lookup_max, 4);
  EXPECT_EQ(c.disable_by_batch_size, 8);

  // One bound given: the other copies it.
  c = parsed(R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3})");
  EXPECT_EQ(c.prompt_lookup_min, 3);
  EXPECT_EQ(c.prompt_lookup_max, 3);
  c = parsed(R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":7})");
  EXPECT_EQ(c.prompt_lookup_min, 7);
  EXPECT_EQ(c.prompt_lookup_max, 7);

  EXPECT_EQ(refused(R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":4,
                        "prompt_lookup_max":2})"),
            "--speculative-config: prompt_lookup_min=4 must be <= prompt_lookup_max=2");
  EXPECT_EQ(refused(R"({"method":"ngram"})"),
            "--speculative-config method=ngram: num_speculative_tokens is required (1 to 32)");
  // Meaningful for ngram only, accepted with other methods.
  EXPECT_EQ(parsed(R"({"method":"mtp","prompt_lookup_min":2})").method, SpeculativeMethod::kMtp);
}

TEST(SpeculativeConfig, NgramFromTheModelKey) {
  for (const char* model : {"ngram", "[ngram]"}) {
    const SpeculativeConfig c =
        parsed(std::string(R"({"model":")") + model + R"(","num_speculative_tokens":2})");
    EXPECT_EQ(c.method, SpeculativeMethod::kNgram) << model;
    EXPECT_EQ(c.method_alias, "ngram");
    EXPECT_TRUE(c.draft_model.empty());
  }
}

TEST(SpeculativeConfig, DraftModel) {
  SpeculativeConfig c =
      parsed(R"({"method":"draft_model","model":"/w/draft.gguf","num_speculative_tokens":5})");
  EXPECT_EQ(c.method, SpeculativeMethod::kDraftModel);
  EXPECT_EQ(c.method_alias, "draft_model");
  EXPECT_EQ(c.draft_model, "/w/draft.gguf");
  EXPECT_EQ(c.k(), 5);
  EXPECT_EQ(c.num_lookahead_tokens(), 5);

  // No method but a model: draft_model, as vLLM.
  c = parsed(R"({"model":"/w/draft","num_speculative_tokens":2})");
  EXPECT_EQ(c.method, SpeculativeMethod::kDraftModel);
  EXPECT_EQ(c.method_alias, "draft_model");
  EXPECT_EQ(c.draft_model, "/w/draft");

  EXPECT_EQ(refused(R"({"method":"draft_model","num_speculative_tokens":3})"),
            "--speculative-config method=draft_model: \"model\" (the draft checkpoint) is "
            "required");
  EXPECT_HAS(refused(R"({"method":"draft_model","model":"","num_speculative_tokens":3})"),
             "\"model\" (the draft checkpoint) is required");
  EXPECT_EQ(refused(R"({"model":"/w/draft"})"),
            "--speculative-config method=draft_model: num_speculative_tokens is required (1 to "
            "32)");
}

TEST(SpeculativeConfig, KWithoutAMethodOrModel) {
  EXPECT_HAS(refused(R"({"num_speculative_tokens":3})"),
             "num_speculative_tokens was provided but without speculative model");
}

TEST(SpeculativeConfig, KAtMost32) {
  EXPECT_EQ(parsed(R"({"method":"ngram","num_speculative_tokens":32})").k(), 32);
  EXPECT_EQ(refused(R"({"method":"ngram","num_speculative_tokens":33})"),
            "--speculative-config num_speculative_tokens=33: at most 32 (vLLM's MAX_SPEC_LEN)");
  EXPECT_HAS(refused(R"({"method":"mtp","num_speculative_tokens":100})"), "at most 32");
}

TEST(SpeculativeConfig, MethodsKestrelDoesNotRunAreRefusedWithAReason) {
  // DeepSeek-V4.1 guides.
  EXPECT_EQ(refused(R"({"num_speculative_tokens":5,"method":"dspark","enforce_eager":true})"),
            "--speculative-config method=dspark: DSpark drafting needs DeepSeek-V4.1, which "
            "Kestrel cannot load yet");
  EXPECT_HAS(refused(R"({"num_speculative_tokens":5,"method":"dspark"})"), "DeepSeek-V4.1");
  EXPECT_EQ(refused(R"({"method":"suffix","num_speculative_tokens":5})"),
            "--speculative-config method=suffix: suffix decoding is not supported (it needs "
            "Arctic Inference's suffix trees); use ngram");
  EXPECT_EQ(refused(R"({"method":"ngram_gpu","num_speculative_tokens":5})"),
            "--speculative-config method=ngram_gpu: not supported; use ngram (the same n-gram "
            "proposals)");
  for (const char* m : {"eagle", "eagle3", "medusa", "mlp_speculator", "custom_class",
                        "extract_hidden_states", "dflash"}) {
    const std::string e =
        refused(std::string(R"({"method":")") + m + R"(","num_speculative_tokens":3})");
    EXPECT_HAS(e, std::string("--speculative-config method=") + m + ": ");
    EXPECT_HAS(e, "not supported");
  }
  // Without k, too.
  EXPECT_HAS(refused(R"({"method":"eagle3","model":"/w/eagle"})"), "method=eagle3");
}

TEST(SpeculativeConfig, UnknownMethodListsTheSupportedOnes) {
  const std::string e = refused(R"({"method":"lookahead","num_speculative_tokens":3})");
  EXPECT_HAS(e, "--speculative-config method=lookahead: unknown method");
  for (const char* m : {"ngram", "draft_model", "mtp", "deepseek_mtp", "qwen3_5_mtp"})
    EXPECT_HAS(e, m);
  EXPECT_HAS(refused(R"({"method":""})"), "unknown method");
}

TEST(SpeculativeConfig, OneValueSettings) {
  // Accepted at their neutral values.
  const SpeculativeConfig c = parsed(
      R"({"method":"mtp","num_speculative_tokens":1,"draft_tensor_parallel_size":1,
          "quantization":null,"max_model_len":4096,"draft_sample_method":"greedy",
          "rejection_sample_method":"standard"})");
  EXPECT_EQ(c.method, SpeculativeMethod::kMtp);
  EXPECT_EQ(c.k(), 1);

  EXPECT_EQ(refused(R"({"method":"mtp","draft_tensor_parallel_size":2})"),
            "--speculative-config draft_tensor_parallel_size=2: tensor parallelism is not "
            "supported yet (issue 20)");
  EXPECT_HAS(refused(R"({"method":"mtp","quantization":"fp8"})"),
             "--speculative-config quantization=fp8: not supported");
  EXPECT_EQ(refused(R"({"method":"mtp","quantization":1})"),
            "--speculative-config: 'quantization' must be a string or null");
  EXPECT_EQ(refused(R"({"method":"mtp","draft_sample_method":"probabilistic"})"),
            "--speculative-config draft_sample_method=probabilistic: not supported yet (greedy)");
  EXPECT_HAS(refused(R"({"method":"mtp","draft_sample_method":"topk"})"),
             "unknown draft_sample_method 'topk'");
  EXPECT_EQ(refused(R"({"method":"mtp","rejection_sample_method":"block"})"),
            "--speculative-config rejection_sample_method=block: not supported yet (standard)");
  EXPECT_HAS(refused(R"({"method":"mtp","rejection_sample_method":"typical"})"),
             "unknown rejection_sample_method 'typical'");
}

TEST(SpeculativeConfig, ResolveMtpDefaultsKToNPredict) {
  SpeculativeConfig c = parsed(R"({"method":"deepseek_mtp"})");
  ASSERT_TRUE(resolve_speculative_config(c, 1, "deepseek_v3").ok());
  EXPECT_EQ(c.num_speculative_tokens, 1);
  c = parsed(R"({"method":"mtp"})");
  ASSERT_TRUE(resolve_speculative_config(c, 2, "glm4_moe").ok());
  EXPECT_EQ(c.k(), 2);
}

TEST(SpeculativeConfig, ResolveMtpKAgainstNPredict) {
  // One MTP layer run k times (DeepSeek-V3): any k.
  SpeculativeConfig c = parsed(R"({"num_speculative_tokens": 3, "method": "mtp"})");
  EXPECT_TRUE(resolve_speculative_config(c, 1, "deepseek_v3").ok());
  EXPECT_EQ(c.k(), 3);
  // k <= n_predict: fine; a larger k must be a multiple.
  c = parsed(R"({"num_speculative_tokens": 1, "method": "mtp"})");
  EXPECT_TRUE(resolve_speculative_config(c, 2, "x").ok());
  c = parsed(R"({"num_speculative_tokens": 4, "method": "mtp"})");
  EXPECT_TRUE(resolve_speculative_config(c, 2, "x").ok());
  c = parsed(R"({"num_speculative_tokens": 3, "method": "mtp"})");
  const Status s = resolve_speculative_config(c, 2, "x");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.message().starts_with("--speculative-config method=mtp: ")) << s.message();
  EXPECT_HAS(s.message(), "num_speculative_tokens must be a multiple of n_predict");
  EXPECT_HAS(s.message(), "num_speculative_tokens=3, n_predict=2");
}

TEST(SpeculativeConfig, ResolveMtpWithoutMtpLayers) {
  SpeculativeConfig c = parsed(R"({"num_speculative_tokens": 3, "method": "mtp"})");
  Status s = resolve_speculative_config(c, 0, "llama");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "--speculative-config method=mtp: the model (llama) has no MTP layers "
            "(num_nextn_predict_layers is 0 or their weights are absent)");

  // An alias names itself; the hybrid models are refused before this (engine_args).
  c = parsed(R"({"method":"qwen3_5_mtp","num_speculative_tokens":3,"enforce_eager":true})");
  s = resolve_speculative_config(c, 0, "qwen3_5_moe");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "--speculative-config method=qwen3_5_mtp: the model (qwen3_5_moe) has no MTP layers "
            "(num_nextn_predict_layers is 0 or their weights are absent)");
}

TEST(SpeculativeConfig, ResolveOtherMethodsChangesNothing) {
  SpeculativeConfig c = parsed(R"({"method":"ngram","num_speculative_tokens":3})");
  EXPECT_TRUE(resolve_speculative_config(c, 0, "llama").ok());
  EXPECT_EQ(c.k(), 3);
  c = parsed(R"({"method":"draft_model","model":"/d","num_speculative_tokens":3})");
  EXPECT_TRUE(resolve_speculative_config(c, 0, "llama").ok());
  EXPECT_EQ(c.k(), 3);
}

}  // namespace
}  // namespace kestrel
