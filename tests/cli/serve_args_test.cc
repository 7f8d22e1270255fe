// `kestrel serve` flags: the argparse behaviours vLLM scripts rely on (prefixes, underscores,
// --no-X, last value wins), model and key options, the JSON flag checks and the other
// dispositions. The guides' command lines: serve_args_deepseek_test.cc, serve_args_qwen35_test.cc.
#include <algorithm>

#include "cli/serve_args_fixture.h"

namespace kestrel::cli::serve_test {
namespace {

// ---- argparse behaviour ----

TEST_F(ServeArgsTest, UniquePrefixExpands) {
  EXPECT_EQ(accepted("@MODEL@ --max-num-seq 4").args->engine.max_num_seqs, 4);
  EXPECT_EQ(accepted("@MODEL@ --max-num-seq=5").args->engine.max_num_seqs, 5);
  EXPECT_EQ(accepted("@MODEL@ --max-num-b 96").args->engine.max_num_batched_tokens, 96);
  // Both names of one option match: not ambiguous.
  EXPECT_EQ(accepted("@MODEL@ --kv-cache-mem 1g").args->engine.kv_cache_memory, "1g");
  EXPECT_FALSE(accepted("@MODEL@ --no-enable-prefix").args->engine.enable_prefix_caching);
  // An exact name wins over the longer names it prefixes.
  const Outcome dp = serve("@MODEL@ --data-parallel-size 2");
  EXPECT_EQ(refusals(dp), Lines{});
  EXPECT_FALSE(dp.args->parallel.data_parallel_size_local);
}

TEST_F(ServeArgsTest, AmbiguousPrefixIsAnError) {
  EXPECT_EQ(serve("@MODEL@ --max-num 4").cli_error,
            "ambiguous option: --max-num could match --max-num-seqs, --max-num-batched-tokens");
  EXPECT_EQ(serve("@MODEL@ --data-parallel-s=2").cli_error,
            "ambiguous option: --data-parallel-s could match --data-parallel-size, "
            "--data-parallel-size-local, --data-parallel-start-rank");
}

TEST_F(ServeArgsTest, UnknownFlagFailsInCli11) {
  const Outcome o = serve("@MODEL@ --bogus-flag 1");
  EXPECT_NE(o.cli_error.find("--bogus-flag"), std::string::npos) << o.cli_error;
  EXPECT_NE(serve("@MODEL@ --port 1 extra").cli_error, "");
  EXPECT_NE(serve("@MODEL@ --port eighty").cli_error, "");
}

TEST_F(ServeArgsTest, UnderscoresMeanDashesInNamesOnly) {
  const Outcome o = accepted(
      "@MODEL@ --max_model_len 4096 --tokenizer_mode=hf --served_model_name my_model "
      "--max_num_seq 3 --speculative_config '{\"num_speculative_tokens\":0}'");
  const ServeArgs& a = *o.args;
  EXPECT_EQ(a.engine.max_model_len, 4096);
  EXPECT_EQ(a.tokenizer_mode, "hf");
  EXPECT_EQ(a.served_model_names, (std::vector<std::string>{"my_model"}));
  EXPECT_EQ(a.engine.max_num_seqs, 3);
  EXPECT_EQ(a.engine.speculative_config, "{\"num_speculative_tokens\":0}");
}

TEST_F(ServeArgsTest, NormalizeLeavesValuesAndTheRestAfterDoubleDashAlone) {
  CLI::App app;
  ServeArgs a;
  add_serve_args(app, a);
  const std::vector<std::string> in = {"--served_model_name", "--not_a_flag_value", "-1", "--",
                                       "--max_num_seq"};
  auto out = normalize_vllm_argv(app, in);
  ASSERT_TRUE(out.ok()) << out.error().message;
  // "--not_a_flag_value" looks like an option, so it is normalized (argparse too would take it
  // as one); "-1" and everything after "--" are not.
  EXPECT_EQ(*out, (std::vector<std::string>{"--served-model-name", "--not-a-flag-value", "-1", "--",
                                            "--max_num_seq"}));
}

TEST_F(ServeArgsTest, BooleanFlagsHaveNegativeForms) {
  EXPECT_FALSE(accepted("@MODEL@ --no-enable-prefix-caching").args->engine.enable_prefix_caching);
  EXPECT_TRUE(accepted("@MODEL@ --enable-prefix-caching").args->engine.enable_prefix_caching);
  EXPECT_TRUE(accepted("@MODEL@").args->engine.enable_prefix_caching);
  // The last of a repeated flag wins.
  EXPECT_TRUE(accepted("@MODEL@ --no-enable-prefix-caching --enable-prefix-caching")
                  .args->engine.enable_prefix_caching);
  EXPECT_FALSE(
      accepted("@MODEL@ --trust-remote-code --no-trust-remote-code").args->trust_remote_code);
  EXPECT_FALSE(accepted("@MODEL@ --no-enable-chunked-prefill").args->engine.enable_chunked_prefill);
}

TEST_F(ServeArgsTest, RepeatedScalarKeepsTheLastValue) {
  EXPECT_EQ(accepted("@MODEL@ --port 1 --port=2").args->port, 2);
  EXPECT_EQ(accepted("@MODEL@ --max-num-seqs 9 --max-num-seqs 7").args->engine.max_num_seqs, 7);
}

TEST_F(ServeArgsTest, MaxModelLenTakesHumanReadableCounts) {
  EXPECT_EQ(accepted("@MODEL@ --max-model-len 16k").args->engine.max_model_len, 16000);
  EXPECT_EQ(accepted("@MODEL@ --max-model-len 16K").args->engine.max_model_len, 16384);
  EXPECT_EQ(accepted("@MODEL@ --max-model-len 1M").args->engine.max_model_len, 1048576);
  EXPECT_EQ(accepted("@MODEL@ --max-model-len 1m").args->engine.max_model_len, 1000000);
  EXPECT_EQ(accepted("@MODEL@ --max-model-len 25.6k").args->engine.max_model_len, 25600);
  EXPECT_EQ(accepted("@MODEL@ --max-model-len 0.5k").args->engine.max_model_len, 500);
  EXPECT_NE(serve("@MODEL@ --max-model-len 1.5K").cli_error, "");  // binary units: whole only
  EXPECT_NE(serve("@MODEL@ --max-model-len 1.0001k").cli_error, "");
  EXPECT_NE(serve("@MODEL@ --max-model-len 99999999999T").cli_error, "");
  EXPECT_NE(serve("@MODEL@ --max-model-len k").cli_error, "");
}

// ---- model, names, key ----

TEST_F(ServeArgsTest, ServedModelNameDefaultsToTheModelAsGiven) {
  const std::string given = model() + "/";
  const Outcome o = accepted(given);
  EXPECT_EQ(o.args->served_model_names, (std::vector<std::string>{given}));
  EXPECT_EQ(accepted("@MODEL@ --served-model-name a b").args->served_model_names,
            (std::vector<std::string>{"a", "b"}));
}

TEST_F(ServeArgsTest, ModelPositionalOrOption) {
  EXPECT_EQ(accepted("--model @MODEL@").args->engine.model, model());
  EXPECT_EQ(accepted("--model @MODEL@").args->served_model_names,
            (std::vector<std::string>{model()}));
  EXPECT_EQ(accepted("@MODEL@ --model @MODEL@").args->engine.model, model());
  EXPECT_EQ(refusals(serve("@MODEL@ --model /other")),
            Lines{"MODEL '" + model() + "' and --model '/other' differ; give the model once"});
  // Without MODEL the default model is served when it was fetched, else MODEL is required.
  const std::string models = ::testing::TempDir() + "kestrel_no_models";
  ::setenv("KESTREL_MODELS", models.c_str(), 1);
  EXPECT_EQ(refusals(serve("--port 1")),
            Lines{"the following arguments are required: MODEL (or fetch the default model with "
                  "scripts/fetch-default-model.sh)"});
  std::filesystem::create_directories(models);
  const std::string fetched = models + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::ofstream(fetched) << "gguf";
  EXPECT_EQ(accepted("--port 1").args->engine.model, fetched);
  std::filesystem::remove_all(models);
  ::unsetenv("KESTREL_MODELS");
  EXPECT_EQ(refusals(serve("/nonexistent/model")),
            Lines{"model '/nonexistent/model': no such file or directory"});
  EXPECT_EQ(refusals(serve("Qwen/Qwen3-0.6B")), Lines{hub("Qwen/Qwen3-0.6B")});
}

TEST_F(ServeArgsTest, ApiKeyFromFlagOrEnvironment) {
  EXPECT_FALSE(accepted("@MODEL@").args->api_key);
  ::setenv("KESTREL_API_KEY", "kestrel-key", 1);
  EXPECT_EQ(accepted("@MODEL@").args->api_key, "kestrel-key");
  ::setenv("VLLM_API_KEY", "vllm-key", 1);
  EXPECT_EQ(accepted("@MODEL@").args->api_key, "vllm-key");
  EXPECT_EQ(accepted("@MODEL@ --api-key flag-key").args->api_key, "flag-key");
  ::setenv("VLLM_API_KEY", "", 1);  // empty counts as unset
  EXPECT_EQ(accepted("@MODEL@").args->api_key, "kestrel-key");
}

// ---- JSON flags ----

TEST_F(ServeArgsTest, JsonFlagsMustBeObjects) {
  const Lines bad = refusals(serve("@MODEL@ --speculative-config '{\"method\": mtp}'"));
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_TRUE(bad[0].starts_with("--speculative-config: not a JSON object: parse error at line 1"))
      << bad[0];
  EXPECT_EQ(refusals(serve("@MODEL@ --compilation-config '[1]'")),
            Lines{"--compilation-config: not a JSON object: found array"});
  EXPECT_EQ(refusals(serve("@MODEL@ --default-chat-template-kwargs '\"x\"'")),
            Lines{"--default-chat-template-kwargs: not a JSON object: found string"});
  EXPECT_EQ(accepted("@MODEL@ --default-chat-template-kwargs '{\"enable_thinking\": false}'")
                .args->default_chat_template_kwargs,
            "{\"enable_thinking\": false}");
}

TEST_F(ServeArgsTest, JsonFlagsRefuseUnknownKeysAndWrongTypes) {
  EXPECT_EQ(
      refusals(serve(
          R"(@MODEL@ --kv-transfer-config '{"kv_connector":"MooncakeConnectorV1","bogus":1}')")),
      Lines{"--kv-transfer-config: unknown key 'bogus'"});
  EXPECT_EQ(
      refusals(serve(
          R"(@MODEL@ --kv-transfer-config '{"kv_connector":"MooncakeConnectorV1","kv_connector_extra_config":{"prefill":{"dp_size":1,"pp_size":2}}}')")),
      Lines{"--kv-transfer-config: unknown key 'kv_connector_extra_config.prefill.pp_size'"});
  EXPECT_EQ(refusals(serve(R"(@MODEL@ --model-loader-extra-config '{"num_threads":"8"}')")),
            Lines{"--model-loader-extra-config: 'num_threads' must be a positive integer"});
  EXPECT_EQ(refusals(serve(R"(@MODEL@ --speculative-config '{"speculative_model":"/draft"}')")),
            Lines{"--speculative-config: unknown key 'speculative_model'"});
  EXPECT_EQ(
      refusals(serve(
          R"(@MODEL@ --speculative-config '{"method":"ngram","num_speculative_tokens":"3"}')")),
      Lines{"--speculative-config: 'num_speculative_tokens' must be a non-negative integer"});
  EXPECT_EQ(refusals(serve(R"(@MODEL@ --limit-mm-per-prompt '{"image":-1}')")),
            Lines{"--limit-mm-per-prompt: 'image' must be a non-negative integer"});
  EXPECT_EQ(refusals(serve(R"(@MODEL@ --additional-config '{"enable_cpu_binding":"yes"}')")),
            Lines{"--additional-config: 'enable_cpu_binding' must be true or false"});
}

TEST_F(ServeArgsTest, JsonFlagValuesAndNeutralValues) {
  // kv_port as a number; a connector Kestrel does not know.
  const Outcome numeric = accepted(
      R"(@MODEL@ --kv-transfer-config '{"kv_connector":"MooncakeConnectorV1","kv_port":30000}')");
  ASSERT_TRUE(numeric.args->engine.kv.has_value());
  EXPECT_EQ(numeric.args->engine.kv->transfer.kv_port, 30000);
  EXPECT_EQ(numeric.args->engine.kv->transfer.role, KvRole::kBoth);
  EXPECT_EQ(refusals(serve(R"(@MODEL@ --kv-transfer-config '{"kv_connector":"NixlConnector"}')")),
            Lines{"--kv-transfer-config: unknown KV connector 'NixlConnector' "
                  "(MooncakeConnectorV1, MooncakeConnector, MooncakeConnectorV2, "
                  "MooncakeHybridConnector)"});
  EXPECT_EQ(refusals(serve(R"(@MODEL@ --kv-transfer-config '{"kv_role":"kv_producer"}')")),
            Lines{"--kv-transfer-config: missing key 'kv_connector'"});
  EXPECT_EQ(
      refusals(serve(
          R"(@MODEL@ --kv-cache-dtype fp8 --calculate-kv-scales --kv-transfer-config '{"kv_connector":"MooncakeConnectorV1"}')")),
      Lines{"--calculate-kv-scales with --kv-transfer-config: each instance would set its own "
            "scales from its own first batch and read the other's blocks with them; give the "
            "scales in the checkpoint"});
  // Neutral: nothing to speculate, no connector.
  EXPECT_FALSE(accepted(R"(@MODEL@ --speculative-config '{}' --kv-transfer-config '{}')")
                   .args->engine.kv.has_value());
  accepted(R"(@MODEL@ --speculative-config '{"num_speculative_tokens":0}')");
  // Every compilation-config key is ignored, known to vLLM or not.
  EXPECT_TRUE(has_note(
      *accepted(R"(@MODEL@ --compilation-config '{"level":3,"cudagraph_capture_sizes":[1,2]}')")
           .args,
      "--compilation-config"));
  // A non-zero modality limit has no effect; 0 is what Kestrel does.
  EXPECT_TRUE(has_note(*accepted(R"(@MODEL@ --limit-mm-per-prompt '{"image":2}')").args,
                       "--limit-mm-per-prompt"));
  EXPECT_TRUE(accepted(R"(@MODEL@ --limit-mm-per-prompt '{"image":0}')").args->notes.empty());
}

// --speculative-config is parsed as vLLM does (spec_decode/speculative_config.h): the methods
// Kestrel runs are accepted, with no note; the engine checks them against the model at start-up.
TEST_F(ServeArgsTest, SpeculativeConfigMethods) {
  for (const char* config :
       {R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4})",
        R"({"method":"draft_model","model":"/w/draft.gguf","num_speculative_tokens":2})",
        R"({"num_speculative_tokens": 3, "method": "mtp"})",
        R"({"method": "qwen3_5_mtp", "num_speculative_tokens": 3, "enforce_eager": true})",
        R"({"method":"deepseek_mtp"})"}) {
    const Outcome o = accepted(std::string("@MODEL@ --speculative-config '") + config + "'");
    EXPECT_EQ(o.args->engine.speculative_config, config);
    EXPECT_TRUE(o.args->notes.empty()) << config;
  }
  EXPECT_EQ(
      refusals(serve(
          R"(@MODEL@ --speculative-config '{"num_speculative_tokens":5,"method":"dspark","enforce_eager":true}')")),
      Lines{kDspark});
  EXPECT_EQ(
      refusals(serve(
          R"(@MODEL@ --speculative-config '{"method":"draft_model","num_speculative_tokens":3}')")),
      Lines{"--speculative-config method=draft_model: \"model\" (the draft checkpoint) is "
            "required"});
  EXPECT_EQ(
      refusals(serve(R"(@MODEL@ --speculative-config '{"num_speculative_tokens":3}')")).size(), 1u);
  // The last of repeated values counts, as for every serve flag.
  EXPECT_EQ(
      accepted(R"(@MODEL@ --speculative-config '{"method":"dspark"}' --speculative_config '{}')")
          .args->engine.speculative_config,
      "{}");
}

// generate and bench take --speculative-config too (add_engine_args).
TEST(EngineConfig, SpeculativeConfigIsAnEngineFlag) {
  CLI::App app;
  EngineConfig e;
  add_engine_args(app, e);
  std::vector<std::string> argv = {"--model", "m", "--speculative-config",
                                   R"({"method":"ngram","num_speculative_tokens":2})"};
  std::reverse(argv.begin(), argv.end());  // CLI11's order
  app.parse(argv);
  EXPECT_EQ(e.speculative_config, R"({"method":"ngram","num_speculative_tokens":2})");
}

TEST_F(ServeArgsTest, AdditionalConfigWarnsOnUnknownKeys) {
  const Outcome o = accepted(
      R"(@MODEL@ --additional-config '{"enable_cpu_binding":true,"new_knob":1,"ascend_compilation_config":{"x":true}}')");
  EXPECT_EQ(o.args->warnings,
            (std::vector<std::string>{"--additional-config: ignoring unknown key "
                                      "'ascend_compilation_config.x'",
                                      "--additional-config: ignoring unknown key 'new_knob'"}));
  EXPECT_EQ(o.args->notes,
            (std::vector<std::string>{"--additional-config ascend_compilation_config, "
                                      "enable_cpu_binding (vLLM-Ascend platform options)"}));
  EXPECT_TRUE(
      accepted(
          R"(@MODEL@ --additional-config '{"scheduler_config":{"recompute_scheduler_enable":false}}')")
          .args->notes.empty());
  // Without PD (or on a prefill instance) the recompute scheduler changes nothing.
  const Outcome alone =
      accepted(R"(@MODEL@ --additional-config '{"recompute_scheduler_enable":true}')");
  EXPECT_FALSE(alone.args->engine.give_back_preempted);
  EXPECT_EQ(alone.args->notes,
            (std::vector<std::string>{"--additional-config recompute_scheduler_enable (only a "
                                      "kv_consumer gives requests back)"}));
}

// ---- other dispositions ----

TEST_F(ServeArgsTest, NeutralParallelValuesAreAccepted) {
  const Outcome o = accepted(
      "@MODEL@ --tensor-parallel-size 1 --data-parallel-size 1 --data-parallel-size-local 1 "
      "--data-parallel-rank 0 --data-parallel-start-rank 0 --data-parallel-address 10.0.0.1 "
      "--data-parallel-rpc-port 13389 --api-server-count 1 --distributed-executor-backend uni "
      "--enable-expert-parallel --no-headless");
  for (const char* flag :
       {"--data-parallel-address", "--data-parallel-rpc-port", "--enable-expert-parallel"})
    EXPECT_TRUE(has_note(*o.args, flag)) << flag;
  EXPECT_EQ(o.args->notes.size(), 3u);
}

TEST_F(ServeArgsTest, LoadBalancingModesSetWhichRanksThisServerRuns) {
  // Internal (the head): its local ranks, the rest from --headless nodes.
  const Outcome head = accepted(
      "@MODEL@ --data-parallel-size 4 --data-parallel-size-local 2 --data-parallel-address "
      "10.0.0.1");
  EXPECT_EQ(head.args->engine.data_parallel_first, 0);
  EXPECT_EQ(head.args->engine.data_parallel_count, 2);
  EXPECT_EQ(head.args->engine.data_parallel_remote, 2);
  // Hybrid: each node's server balances its own ranks, nothing joins it.
  const Outcome hybrid = accepted(
      "@MODEL@ --data-parallel-size 4 --data-parallel-size-local 2 --data-parallel-start-rank 2 "
      "--data-parallel-hybrid-lb");
  EXPECT_EQ(hybrid.args->engine.data_parallel_first, 2);
  EXPECT_EQ(hybrid.args->engine.data_parallel_count, 2);
  EXPECT_EQ(hybrid.args->engine.data_parallel_remote, 0);
  // External: one rank.
  const Outcome external =
      accepted("@MODEL@ --data-parallel-size 4 --data-parallel-rank 3 --data-parallel-external-lb");
  EXPECT_EQ(external.args->engine.data_parallel_first, 3);
  EXPECT_EQ(external.args->engine.data_parallel_count, 1);
  EXPECT_EQ(external.args->engine.data_parallel_remote, 0);
  EXPECT_EQ(refusals(serve("@MODEL@ --data-parallel-size 4 --data-parallel-external-lb")),
            Lines{"--data-parallel-external-lb: give this server's rank with --data-parallel-rank "
                  "(one server per rank)"});
  EXPECT_EQ(refusals(serve("@MODEL@ --data-parallel-size 4 --data-parallel-size-local 2 "
                           "--data-parallel-start-rank 2 --headless --data-parallel-hybrid-lb")),
            Lines{"--data-parallel-hybrid-lb: a node's own server balancing its ranks excludes "
                  "--data-parallel-external-lb, --headless and --data-parallel-rank"});
  EXPECT_EQ(refusals(serve("@MODEL@ --data-parallel-size 4 --data-parallel-size-local 2 "
                           "--data-parallel-start-rank 2")),
            Lines{"--data-parallel-start-rank 2: only a --headless node starts past rank 0 (the "
                  "head runs rank 0)"});
}

TEST_F(ServeArgsTest, RefusedParallelAndBackendValues) {
  EXPECT_EQ(refusals(serve("@MODEL@ --api-server-count 3")), Lines{});
  EXPECT_NE(serve("@MODEL@ --api-server-count 0").cli_error, "");
  EXPECT_EQ(refusals(serve("@MODEL@ --distributed-executor-backend external_launcher")),
            Lines{"--distributed-executor-backend external_launcher: not supported; Kestrel "
                  "starts its own worker processes (use mp)"});
  EXPECT_NE(serve("@MODEL@ --distributed-executor-backend bogus").cli_error, "");
  EXPECT_NE(serve("@MODEL@ --tensor-parallel-size 0").cli_error, "");
}

TEST_F(ServeArgsTest, ParserFlags) {
  EXPECT_EQ(refusals(serve("@MODEL@ --tool-call-parser hermes")), Lines{});
  for (const char* name :
       {"qwen3", "deepseek_r1", "deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4"})
    EXPECT_EQ(refusals(serve(std::string("@MODEL@ --reasoning-parser ") + name)), Lines{}) << name;
  for (const char* name : {"deepseek_v32", "deepseek_v4"})
    EXPECT_EQ(refusals(serve(std::string("@MODEL@ --enable-auto-tool-choice --tool-call-parser ") +
                             name)),
              Lines{})
        << name;
  EXPECT_EQ(refusals(serve("@MODEL@ --reasoning-parser granite")),
            Lines{"--reasoning-parser granite: not supported (deepseek_r1, deepseek_v3, "
                  "deepseek_v31, deepseek_v32, deepseek_v4, qwen3)"});
  // The names the chat module knows, one list for both the parsers and the check.
  EXPECT_EQ(refusals(serve("@MODEL@ --tool-call-parser pythonic")),
            Lines{"--tool-call-parser pythonic: not supported (deepseek_v3, deepseek_v31, "
                  "deepseek_v32, deepseek_v4, hermes, llama3_json, mistral, qwen3_coder)"});
  EXPECT_EQ(refusals(serve("@MODEL@ --enable-auto-tool-choice")),
            Lines{"--enable-auto-tool-choice: needs --tool-call-parser"});
}

TEST_F(ServeArgsTest, PrecisionAndFormatValues) {
  EXPECT_EQ(accepted("@MODEL@ --dtype half").args->engine.dtype, "half");
  accepted("@MODEL@ --kv-cache-dtype bfloat16 --load-format gguf --tokenizer-mode hf");
  EXPECT_EQ(refusals(serve("@MODEL@ --dtype float8")),
            Lines{"--dtype float8: not supported (auto, float16, bfloat16, float32)"});
  for (const char* d : {"fp8", "fp8_e4m3", "fp8_e5m2", "mxfp8", "int8"})
    EXPECT_EQ(accepted(std::string("@MODEL@ --calculate-kv-scales --kv-cache-dtype ") + d)
                  .args->engine.kv_cache_dtype,
              d);
  EXPECT_TRUE(accepted("@MODEL@ --calculate-kv-scales").args->engine.calculate_kv_scales);
  EXPECT_EQ(refusals(serve("@MODEL@ --kv-cache-dtype fp4")),
            Lines{"--kv-cache-dtype fp4: not supported (auto, bfloat16, float16, float32, fp8, "
                  "fp8_e4m3, fp8_e5m2, mxfp8, int8)"});
  EXPECT_EQ(refusals(serve("@MODEL@ --quantization awq")),
            Lines{"--quantization awq: not supported (Kestrel reads a GGUF file's quantization "
                  "from the file, FP8 block-quantized checkpoints from config.json, and "
                  "msModelSlim ones with --quantization ascend; planned: deepseek_v4_fp8)"});
  // FP8 block checkpoints are read; serve checks the checkpoint after loading it.
  EXPECT_EQ(accepted("@MODEL@ --quantization fp8").args->engine.quantization, "fp8");
  // msModelSlim's: the loader reads the description file and refuses what it cannot run.
  EXPECT_EQ(accepted("@MODEL@ --quantization ascend").args->engine.quantization, "ascend");
  EXPECT_EQ(refusals(serve("@MODEL@ --tokenizer-mode mistral")),
            Lines{"--tokenizer-mode mistral: not supported (auto, hf, deepseek_v32, deepseek_v4)"});
  // DeepSeek's native chat encoders.
  for (const char* mode : {"deepseek_v32", "deepseek_v4"})
    EXPECT_EQ(accepted(std::string("@MODEL@ --tokenizer-mode ") + mode).args->tokenizer_mode, mode);
  EXPECT_EQ(refusals(serve("@MODEL@ --tokenizer-mode deepseek_v41")), Lines{kTokenizerV41});
  EXPECT_TRUE(has_note(*accepted("@MODEL@ --safetensors-load-strategy eager").args,
                       "--safetensors-load-strategy eager"));
  EXPECT_TRUE(accepted("@MODEL@ --safetensors-load-strategy lazy").args->notes.empty());
}

TEST_F(ServeArgsTest, KvCacheManagerAndReplayFlags) {
  EXPECT_EQ(refusals(serve("@MODEL@ --disable-hybrid-kv-cache-manager")),
            Lines{"--disable-hybrid-kv-cache-manager: not supported; Kestrel always manages KV "
                  "per layer group"});
  EXPECT_TRUE(accepted("@MODEL@ --no-swa-bounded-replay").args->warnings.size() == 1);
  EXPECT_TRUE(accepted("@MODEL@ --swa-bounded-replay").args->warnings.empty());
}

TEST_F(ServeArgsTest, ChatTemplateIsAFileOrInlineText) {
  accepted("@MODEL@ --chat-template '{{ messages[0].content }}'");
  accepted("@MODEL@ --chat-template " + (dir_ / "template.jinja").string());
  EXPECT_EQ(refusals(serve("@MODEL@ --chat-template /nonexistent/template.jinja")),
            Lines{"--chat-template /nonexistent/template.jinja: looks like a file path, but "
                  "there is no such file"});
}

TEST_F(ServeArgsTest, OwnFlagsParse) {
  const Outcome o = accepted(
      "@MODEL@ --shutdown-timeout 5 --max-logprobs 7 --uvicorn-log-level debug "
      "--disable-log-requests --enable-log-requests");
  EXPECT_DOUBLE_EQ(o.args->shutdown_grace_s, 5);
  EXPECT_EQ(o.args->max_logprobs, 7);
  EXPECT_EQ(o.args->uvicorn_log_level, "debug");
  EXPECT_TRUE(o.args->disable_log_requests);
  EXPECT_TRUE(o.args->enable_log_requests);
  EXPECT_NE(serve("@MODEL@ --uvicorn-log-level loud").cli_error, "");
}

// The fixed refusal texts that docs/compatibility.md quotes are the ones printed.
TEST_F(ServeArgsTest, DocumentedRefusalTextsMatch) {
  auto doc = read_text_file(test::source_dir() + "/docs/compatibility.md");
  ASSERT_TRUE(doc.ok());
  auto refusal = [](const std::string& cmdline) {
    const Lines lines = refusals(serve(cmdline));
    return lines.size() == 1 ? lines[0] : std::string("(not one refusal)");
  };
  std::string hub_text = refusal("Org/Some-Model");
  hub_text.replace(hub_text.find("Org/Some-Model"), 14, "ID");
  for (const std::string& text :
       {refusal("@MODEL@ --distributed-executor-backend ray"),
        refusal("@MODEL@ --disable-hybrid-kv-cache-manager"), refusal("@MODEL@ --load-format X"),
        refusal("@MODEL@ --kv-cache-dtype fp4"), refusal("@MODEL@ --tokenizer-mode deepseek_v41"),
        refusal(R"(@MODEL@ --engram-config '{"cpu_offload":true}')"),
        refusal(R"(@MODEL@ --kv-transfer-config '{"kv_connector":"X"}')"),
        refusal("@MODEL@ --tensor-parallel-size 4 --distributed-executor-backend uni"),
        refusal("@MODEL@ --headless"), refusal("@MODEL@ --quantization X"),
        refusal("@MODEL@ --tokenizer-mode X"), refusal("@MODEL@ --chat-template X"),
        refusal(R"(@MODEL@ --speculative-config '{"method":"dspark","num_speculative_tokens":5}')"),
        refusal(R"(@MODEL@ --speculative-config '{"method":"suffix","num_speculative_tokens":5}')"),
        hub_text})
    EXPECT_NE(doc->find(text), std::string::npos) << text;
}

// --kv-transfer-config beyond the guides' own lines: the layouts in kv_connector_extra_config
// must be the instance's, headless ranks are refused, the push connector is refused with why.
TEST_F(ServeArgsTest, KvTransferConfigFitsTheInstance) {
  const Outcome d = accepted(
      R"(@MODEL@ --tensor-parallel-size 2 --kv-transfer-config '{"kv_connector":"MooncakeConnectorV1","kv_role":"kv_consumer","kv_port":"31000","engine_id":7,"kv_load_failure_policy":"fail","kv_connector_module_path":"mooncake.x","kv_connector_extra_config":{"prefill":{"dp_size":4,"tp_size":1},"decode":{"dp_size":1,"tp_size":2},"kv_lease_duration":2.5,"kv_load_timeout":4}}')");
  ASSERT_TRUE(d.args->engine.kv.has_value());
  const KvTransferConfig& t = d.args->engine.kv->transfer;
  EXPECT_EQ(t.role, KvRole::kConsumer);
  EXPECT_EQ(t.kv_port, 31000);
  EXPECT_EQ(t.engine_id, "7");
  EXPECT_EQ(t.load_failure_policy, KvLoadFailurePolicy::kFail);
  EXPECT_EQ(t.lease_duration, std::chrono::milliseconds(2500));
  EXPECT_EQ(t.load_timeout, std::chrono::milliseconds(4000));
  EXPECT_TRUE(has_note(*d.args, "--kv-transfer-config kv_connector_module_path"));

  EXPECT_EQ(
      refusals(serve(
          R"(@MODEL@ --kv-transfer-config '{"kv_connector":"MooncakeConnectorV1","kv_role":"kv_producer","kv_connector_extra_config":{"prefill":{"dp_size":2,"tp_size":8}}}')")),
      Lines{"--kv-transfer-config kv_connector_extra_config.prefill: dp_size 2, tp_size 8, but "
            "this prefill instance runs --data-parallel-size 1 and --tensor-parallel-size 1"});
  EXPECT_EQ(
      refusals(serve(
          R"(@MODEL@ --data-parallel-size 2 --data-parallel-size-local 1 --data-parallel-start-rank 1 --headless --kv-transfer-config '{"kv_connector":"MooncakeConnectorV1","kv_role":"kv_consumer"}')")),
      Lines{"--kv-transfer-config: a node's data-parallel ranks serve their KV from that node, so "
            "each node runs its own server (--data-parallel-rank per rank, or "
            "--data-parallel-hybrid-lb), not --headless ranks behind a head"});
  const auto layerwise = refusals(serve(
      R"(@MODEL@ --kv-transfer-config '{"kv_connector":"MooncakeLayerwiseConnector","kv_role":"kv_consumer"}')"));
  ASSERT_EQ(layerwise.size(), 1u);
  EXPECT_NE(layerwise[0].find("push connector"), std::string::npos) << layerwise[0];
  EXPECT_EQ(
      refusals(serve(
          R"(@MODEL@ --kv-transfer-config '{"kv_connector":"MooncakeConnectorV1","kv_load_failure_policy":"retry"}')")),
      Lines{"--kv-transfer-config kv_load_failure_policy: 'retry' is neither fail nor recompute"});
  EXPECT_EQ(
      refusals(serve(
          R"(@MODEL@ --kv-transfer-config '{"kv_connector":"MooncakeConnectorV1","kv_connector_extra_config":{"kv_lease_duration":0}}')")),
      Lines{"--kv-transfer-config: 'kv_connector_extra_config.kv_lease_duration' must be a "
            "number above 0"});
}

}  // namespace
}  // namespace kestrel::cli::serve_test
