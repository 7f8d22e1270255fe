// `kestrel serve` flags: every `vllm serve` command line of the deployment guides
// (../shared/seeds/) parses to the outcome docs/compatibility.md documents, plus the argparse
// behaviours vLLM scripts rely on (prefixes, underscores, --no-X, last value wins) and the JSON
// flag checks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "base/mmap_file.h"
#include "cli/serve_args.h"
#include "test_paths.h"

namespace kestrel::cli {
namespace {

namespace fs = std::filesystem;

// Splits a command line as sh does for the guides' commands: blanks, '…', "…" and
// backslash-newline continuations. Variables are substituted by hand before.
std::vector<std::string> shell_split(std::string_view s) {
  std::vector<std::string> out;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\\' && i + 1 < s.size()) {
      if (s[i + 1] != '\n') {
        word += s[i + 1];
        in_word = true;
      }
      ++i;
    } else if (c == '\'' || c == '"') {
      const size_t end = std::min(s.find(c, i + 1), s.size());
      word.append(s.substr(i + 1, end - i - 1));
      in_word = true;
      i = end;
    } else if (c == ' ' || c == '\n' || c == '\t') {
      if (in_word) out.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(word);
  return out;
}

struct Outcome {
  std::unique_ptr<ServeArgs> args = std::make_unique<ServeArgs>();
  std::string cli_error;  // from normalize_vllm_argv or CLI11; finalize did not run
  Status status;
};

class ServeArgsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kestrel_serve_args_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "model");
    std::ofstream(dir_ / "template.jinja") << "{{ messages }}";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    ::unsetenv("VLLM_API_KEY");
    ::unsetenv("KESTREL_API_KEY");
  }
  void TearDown() override { SetUp(); }

  static std::string model() { return (dir_ / "model").string(); }

  // Parses `cmdline` (the arguments after `serve`; @MODEL@ stands for an existing model
  // directory) as `kestrel serve` does.
  static Outcome serve(std::string cmdline) {
    for (size_t at; (at = cmdline.find("@MODEL@")) != std::string::npos;)
      cmdline.replace(at, 7, model());
    Outcome o;
    CLI::App app{"kestrel serve"};
    add_serve_args(app, *o.args);
    auto argv = normalize_vllm_argv(app, shell_split(cmdline));
    if (!argv.ok()) {
      o.cli_error = argv.error().message;
      return o;
    }
    std::vector<std::string> reversed(argv->rbegin(), argv->rend());  // CLI11's order
    try {
      app.parse(reversed);
    } catch (const CLI::ParseError& e) {
      o.cli_error = e.what();
      return o;
    }
    o.status = finalize_serve_args(*o.args);
    return o;
  }

  // The refusal lines of an outcome that got through CLI11.
  static std::vector<std::string> refusals(const Outcome& o) {
    EXPECT_EQ(o.cli_error, "");
    std::vector<std::string> lines;
    if (o.status.ok()) return lines;
    std::istringstream in(o.status.message());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  static Outcome accepted(const std::string& cmdline) {
    Outcome o = serve(cmdline);
    EXPECT_EQ(o.cli_error, "") << cmdline;
    EXPECT_TRUE(o.status.ok()) << o.status.message();
    return o;
  }

  static bool has_note(const ServeArgs& a, std::string_view flag) {
    for (const std::string& n : a.notes)
      if (n.starts_with(flag)) return true;
    return false;
  }

  static inline fs::path dir_;
};

// Expected refusal texts (docs/compatibility.md §2–§9, §15).
std::string tp(int n) {
  return "--tensor-parallel-size " + std::to_string(n) +
         ": tensor parallelism is not supported yet";
}
std::string dp(std::string_view flag, int n) {
  return std::string(flag) + " " + std::to_string(n) + ": data parallelism is not supported yet";
}
std::string dp_size(int n) {
  return dp("--data-parallel-size", n);
}
std::string dp_local(int n) {
  return dp("--data-parallel-size-local", n);
}
std::string dp_start(int n) {
  return dp("--data-parallel-start-rank", n);
}
std::string dp_rank(int n) {
  return dp("--data-parallel-rank", n);
}
std::string spec(std::string_view method) {
  return "--speculative-config method=" + std::string(method) +
         ": speculative decoding is not supported yet";
}
std::string pd(std::string_view connector) {
  return "--kv-transfer-config kv_connector=" + std::string(connector) +
         ": PD disaggregation is not supported yet";
}
std::string recompute(bool nested) {
  return std::string("--additional-config ") + (nested ? "scheduler_config." : "") +
         "recompute_scheduler_enable=true: recomputing PD requests on the prefill side is not "
         "supported yet";
}
std::string hub(std::string_view id) {
  return "model '" + std::string(id) +
         "': no such file or directory (Kestrel does not download models; download the "
         "checkpoint and pass its path)";
}
const std::string kHeadless = "--headless: multi-node data parallelism is not supported yet";
const std::string kAscend =
    "--quantization ascend: Ascend msModelSlim checkpoints (W8A8, W4A8) are not supported yet";
const std::string kMxfp8 =
    "--kv-cache-dtype mxfp8: FP8 KV cache is not supported yet (use auto, bfloat16 or float16)";
const std::string kTokenizerV41 = "--tokenizer-mode deepseek_v41: not supported yet (auto, hf)";
const std::string kToolV41 =
    "--tool-call-parser deepseek_v41: not supported (hermes, qwen3_coder, deepseek_v3, "
    "deepseek_v31, llama3_json, mistral)";
const std::string kReasoningV41 =
    "--reasoning-parser deepseek_v41: not supported (qwen3, deepseek_r1, deepseek_v3, "
    "deepseek_v31)";
const std::string kEngram =
    "--engram-config: needs a model with Engram layers (DeepSeek-V4.1), which Kestrel does not "
    "support yet";

using Lines = std::vector<std::string>;

// ---- DeepSeek-V3.1 guide (/weights/DeepSeek-V3.1-w8a8-mtp-QuaRot → @MODEL@) ----

// §5.1, single node.
constexpr const char* kDs3Single = R"sh(@MODEL@ \
--host 0.0.0.0 \
--port 8015 \
--data-parallel-size 4 \
--tensor-parallel-size 4 \
--quantization ascend \
--seed 1024 \
--served-model-name deepseek_v3 \
--enable-expert-parallel \
--max-num-seqs 16 \
--max-model-len 16384 \
--max-num-batched-tokens 4096 \
--trust-remote-code \
--no-enable-prefix-caching \
--gpu-memory-utilization 0.92 \
--speculative-config '{"num_speculative_tokens": 3, "method": "mtp"}' \
--compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY"}')sh";

TEST_F(ServeArgsTest, DeepSeekV31SingleNode) {
  const Outcome o = serve(kDs3Single);
  EXPECT_EQ(refusals(o), (Lines{tp(4), dp_size(4), kAscend, spec("mtp")}));
  const ServeArgs& a = *o.args;
  EXPECT_EQ(a.port, 8015);
  EXPECT_EQ(a.engine.seed, 1024u);
  EXPECT_EQ(a.served_model_names, (std::vector<std::string>{"deepseek_v3"}));
  EXPECT_EQ(a.engine.max_num_seqs, 16);
  EXPECT_EQ(a.engine.max_model_len, 16384);
  EXPECT_EQ(a.engine.max_num_batched_tokens, 4096);
  EXPECT_FALSE(a.engine.enable_prefix_caching);
  EXPECT_DOUBLE_EQ(a.engine.gpu_memory_utilization.value_or(0), 0.92);
  EXPECT_TRUE(a.trust_remote_code);
  EXPECT_TRUE(a.parallel.enable_expert_parallel);
}

// §5.2, two nodes with multi-node DP ($node0_ip → 10.0.0.1).
TEST_F(ServeArgsTest, DeepSeekV31MultiNode) {
  const Outcome node0 = serve(R"sh(@MODEL@ \
--host 0.0.0.0 \
--port 8004 \
--data-parallel-size 4 \
--data-parallel-size-local 2 \
--data-parallel-address 10.0.0.1 \
--data-parallel-rpc-port 13389 \
--tensor-parallel-size 4 \
--quantization ascend \
--seed 1024 \
--served-model-name deepseek_v3 \
--enable-expert-parallel \
--max-num-seqs 16 \
--max-model-len 16384 \
--max-num-batched-tokens 4096 \
--trust-remote-code \
--no-enable-prefix-caching \
--gpu-memory-utilization 0.92 \
--speculative-config '{"num_speculative_tokens": 3, "method": "mtp"}' \
--compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY"}')sh");
  EXPECT_EQ(refusals(node0), (Lines{tp(4), dp_size(4), dp_local(2), kAscend, spec("mtp")}));
  EXPECT_EQ(node0.args->parallel.data_parallel_address, "10.0.0.1");
  EXPECT_EQ(node0.args->parallel.data_parallel_rpc_port, 13389);

  const Outcome node1 = serve(R"sh(@MODEL@ \
--host 0.0.0.0 \
--port 8004 \
--headless \
--data-parallel-size 4 \
--data-parallel-size-local 2 \
--data-parallel-start-rank 2 \
--data-parallel-address 10.0.0.1 \
--data-parallel-rpc-port 13389 \
--tensor-parallel-size 4 \
--quantization ascend \
--seed 1024 \
--served-model-name deepseek_v3 \
--enable-expert-parallel \
--max-num-seqs 16 \
--max-model-len 16384 \
--max-num-batched-tokens 4096 \
--trust-remote-code \
--no-enable-prefix-caching \
--gpu-memory-utilization 0.92 \
--speculative-config '{"num_speculative_tokens": 3, "method": "mtp"}' \
--compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY"}')sh");
  EXPECT_EQ(refusals(node1),
            (Lines{tp(4), dp_size(4), dp_local(2), dp_start(2), kHeadless, kAscend, spec("mtp")}));
}

// §5.3 PD, run_dp_template.sh as launch_online_dp.py starts it: prefill --dp-size 2 --tp-size 8
// (ranks 0 and 1), decode --dp-size 32 --tp-size 1 (rank 0 on d0, rank 16 on d1).
TEST_F(ServeArgsTest, DeepSeekV31PdPrefill) {
  const std::string prefill = R"sh(@MODEL@ \
       --host 0.0.0.0 \
       --port 7100 \
       --data-parallel-size 2 \
       --data-parallel-rank RANK \
       --data-parallel-address 141.0.0.1 \
       --data-parallel-rpc-port 12321 \
       --tensor-parallel-size 8 \
       --enable-expert-parallel \
       --seed 1024 \
       --served-model-name deepseek_v3 \
       --max-model-len 65536 \
       --max-num-batched-tokens 16384 \
       --max-num-seqs 8 \
       --enforce-eager \
       --trust-remote-code \
       --gpu-memory-utilization 0.9 \
       --quantization ascend \
       --no-enable-prefix-caching \
       --speculative-config '{"num_speculative_tokens": 1, "method": "mtp"}' \
       --kv-transfer-config \
       '{"kv_connector": "MooncakeConnectorV1",
       "kv_role": "kv_producer",
       "kv_port": "KV_PORT",
       "kv_connector_extra_config": {
               "prefill": {
                       "dp_size": 2,
                       "tp_size": 8
               },
               "decode": {
                       "dp_size": 32,
                       "tp_size": 1
               }
           }
       }')sh";
  auto with = [&](std::string rank, std::string port) {
    std::string s = prefill;
    s.replace(s.find("RANK"), 4, rank);
    s.replace(s.find("KV_PORT"), 7, port);
    return s;
  };
  const Outcome p0 = serve(with("0", "30000"));
  EXPECT_EQ(refusals(p0),
            (Lines{tp(8), dp_size(2), kAscend, spec("mtp"), pd("MooncakeConnectorV1")}));
  EXPECT_TRUE(has_note(*p0.args, "--enforce-eager"));
  const Outcome p1 = serve(with("1", "30100"));
  EXPECT_EQ(refusals(p1), (Lines{tp(8), dp_size(2), dp_rank(1), kAscend, spec("mtp"),
                                 pd("MooncakeConnectorV1")}));
}

TEST_F(ServeArgsTest, DeepSeekV31PdDecode) {
  const std::string decode = R"sh(@MODEL@ \
       --host 0.0.0.0 \
       --port 7100 \
       --data-parallel-size 32 \
       --data-parallel-rank RANK \
       --data-parallel-address 141.0.0.3 \
       --data-parallel-rpc-port 12321 \
       --tensor-parallel-size 1 \
       --enable-expert-parallel \
       --seed 1024 \
       --served-model-name deepseek_v3 \
       --max-model-len 65536 \
       --max-num-batched-tokens 256 \
       --max-num-seqs 28 \
       --trust-remote-code \
       --gpu-memory-utilization 0.92 \
       --quantization ascend \
       --no-enable-prefix-caching \
       --speculative-config '{"num_speculative_tokens": 1, "method": "mtp"}' \
       --compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY"}' \
       --additional-config '{"recompute_scheduler_enable":true,"multistream_overlap_shared_expert": true,"finegrained_tp_config": {"lmhead_tensor_parallel_size":16}}' \
       --kv-transfer-config \
       '{"kv_connector": "MooncakeConnectorV1",
       "kv_role": "kv_consumer",
       "kv_port": "30200",
       "kv_connector_extra_config": {
               "prefill": {
                       "dp_size": 2,
                       "tp_size": 8
               },
               "decode": {
                       "dp_size": 32,
                       "tp_size": 1
               }
           }
       }')sh";
  std::string d0 = decode, d1 = decode;
  d0.replace(d0.find("RANK"), 4, "0");
  d1.replace(d1.find("RANK"), 4, "16");
  EXPECT_EQ(refusals(serve(d0)), (Lines{dp_size(32), kAscend, spec("mtp"),
                                        pd("MooncakeConnectorV1"), recompute(false)}));
  const Outcome o = serve(d1);
  EXPECT_EQ(refusals(o), (Lines{dp_size(32), dp_rank(16), kAscend, spec("mtp"),
                                pd("MooncakeConnectorV1"), recompute(false)}));
  EXPECT_EQ(o.args->engine.max_num_batched_tokens, 256);
  EXPECT_EQ(o.args->engine.max_num_seqs, 28);
}

// ---- DeepSeek-V4.1-Flash guide ("$MODEL_PATH" → @MODEL@) ----

// §5.1, A3 single node.
TEST_F(ServeArgsTest, DeepSeekV41SingleNode) {
  const Outcome o = serve(R"sh("@MODEL@" \
    --host 0.0.0.0 \
    --port 8900 \
    --max-model-len 150000 \
    --max-num-batched-tokens 8192 \
    --served-model-name dsv41 \
    --gpu-memory-utilization 0.9 \
    --max-num-seqs 32 \
    --data-parallel-size 4 \
    --tensor-parallel-size 4 \
    --enable-expert-parallel \
    --tokenizer-mode deepseek_v41 \
    --reasoning-parser deepseek_v41 \
    --tool-call-parser deepseek_v41 \
    --enable-auto-tool-choice \
    --safetensors-load-strategy lazy \
    --model-loader-extra-config '{"enable_multithread_load":true,"num_threads":128}' \
    --quantization ascend \
    --block-size 128 \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --async-scheduling \
    --engram-config '{"cpu_offload":true,"dp_shared_memory":true}' \
    --additional-config '{
        "ascend_compilation_config":{
            "enable_npugraph_ex":true,
            "enable_static_kernel":false
        },
        "enable_cpu_binding":true,
        "enable_fused_mc2":1,
        "enable_dsa_cp":true,
        "enable_flashcomm1":true,
        "enable_shared_expert_dp":true
    }')sh");
  EXPECT_EQ(refusals(o),
            (Lines{tp(4), dp_size(4), kAscend, kTokenizerV41, kToolV41, kReasoningV41, kEngram}));
  EXPECT_EQ(o.args->engine.block_size, 128);
  EXPECT_EQ(o.args->engine.max_model_len, 150000);
  EXPECT_TRUE(o.args->warnings.empty());
}

// §5.2 PD through run_dp_template.sh: prefill DP4/TP4 (rank 0), decode DP8/TP2 (rank 3).
TEST_F(ServeArgsTest, DeepSeekV41PdPrefill) {
  const Outcome o = serve(R"sh("@MODEL@" \
    --host 0.0.0.0 \
    --port 7100 \
    --data-parallel-size 4 \
    --data-parallel-rank 0 \
    --data-parallel-address 10.0.0.1 \
    --data-parallel-rpc-port 12321 \
    --tensor-parallel-size 4 \
    --enable-expert-parallel \
    --seed 1024 \
    --served-model-name dsv41 \
    --max-model-len 1048576 \
    --max-num-batched-tokens 8192 \
    --max-num-seqs 16 \
    --speculative-config '{"num_speculative_tokens":5,"method":"dspark"}' \
    --trust-remote-code \
    --block-size 128 \
    --tokenizer-mode deepseek_v41 \
    --reasoning-parser deepseek_v41 \
    --tool-call-parser deepseek_v41 \
    --enable-auto-tool-choice \
    --model-loader-extra-config '{"enable_multithread_load":true,"num_threads":128}' \
    --safetensors-load-strategy lazy \
    --gpu-memory-utilization 0.9 \
    --quantization ascend \
    --enforce-eager \
    --enable-prefix-caching \
    --engram-config '{"cpu_offload":true,"dp_shared_memory":true}' \
    --additional-config '{
        "enable_cpu_binding":true,
        "enable_fused_mc2":1,
        "enable_dsa_cp":true,
        "enable_flashcomm1":true,
        "enable_shared_expert_dp":true
    }' \
    --kv-transfer-config '{
        "kv_connector":"MooncakeHybridConnector",
        "kv_role":"kv_producer",
        "kv_port":"30000",
        "engine_id":"0",
        "kv_connector_extra_config":{
            "prefill":{"dp_size":4,"tp_size":4},
            "decode":{"dp_size":8,"tp_size":2}
        }
    }')sh");
  EXPECT_EQ(refusals(o),
            (Lines{tp(4), dp_size(4), kAscend, spec("dspark"), pd("MooncakeHybridConnector"),
                   kTokenizerV41, kToolV41, kReasoningV41, kEngram}));
  EXPECT_EQ(o.args->engine.max_model_len, 1048576);
}

TEST_F(ServeArgsTest, DeepSeekV41PdDecode) {
  const Outcome o = serve(R"sh("@MODEL@" \
    --host 0.0.0.0 \
    --port 7103 \
    --data-parallel-size 8 \
    --data-parallel-rank 3 \
    --data-parallel-address 10.0.0.2 \
    --data-parallel-rpc-port 12321 \
    --tensor-parallel-size 2 \
    --enable-expert-parallel \
    --seed 1024 \
    --served-model-name dsv41 \
    --max-model-len 1048576 \
    --max-num-batched-tokens 400 \
    --max-num-seqs 32 \
    --async-scheduling \
    --block-size 128 \
    --no-enable-prefix-caching \
    --trust-remote-code \
    --tokenizer-mode deepseek_v41 \
    --reasoning-parser deepseek_v41 \
    --tool-call-parser deepseek_v41 \
    --enable-auto-tool-choice \
    --model-loader-extra-config '{"enable_multithread_load":true,"num_threads":128}' \
    --safetensors-load-strategy lazy \
    --gpu-memory-utilization 0.95 \
    --quantization ascend \
    --speculative-config '{"num_speculative_tokens":5,"method":"dspark","enforce_eager":true}' \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --kv-transfer-config '{
        "kv_connector":"MooncakeHybridConnector",
        "kv_role":"kv_consumer",
        "kv_port":"30100",
        "engine_id":"1",
        "kv_connector_extra_config":{
            "prefill":{"dp_size":4,"tp_size":4},
            "decode":{"dp_size":8,"tp_size":2}
        }
    }' \
    --engram-config '{"cpu_offload":true,"dp_shared_memory":true}' \
    --additional-config '{
        "ascend_compilation_config":{
            "enable_npugraph_ex":true,
            "enable_static_kernel":false
        },
        "enable_cpu_binding":true,
        "multistream_overlap_shared_expert":true,
        "recompute_scheduler_enable":true
    }')sh");
  EXPECT_EQ(refusals(o), (Lines{tp(2), dp_size(8), dp_rank(3), kAscend, spec("dspark"),
                                pd("MooncakeHybridConnector"), recompute(false), kTokenizerV41,
                                kToolV41, kReasoningV41, kEngram}));
}

// §5.3, A2 multi-node: node 0 ("${HEADLESS_ARGS[@]}" empty) and node 1 (--headless
// --data-parallel-start-rank 1).
TEST_F(ServeArgsTest, DeepSeekV41MultiNode) {
  const std::string cmd = R"sh("@MODEL@" \
  --host 0.0.0.0 \
  --port 8000 \
  HEADLESS_ARGS \
  --data-parallel-address "10.0.0.1" \
  --data-parallel-rpc-port 13399 \
  --data-parallel-size 4 \
  --data-parallel-size-local 1 \
  --tensor-parallel-size 8 \
  --enable-expert-parallel \
  --served-model-name deepseek-v41 \
  --max-model-len 1048576 \
  --max-num-batched-tokens 4096 \
  --max-num-seqs 32 \
  --gpu-memory-utilization 0.90 \
  --block-size 128 \
  --tokenizer-mode deepseek_v41 \
  --reasoning-parser deepseek_v41 \
  --tool-call-parser deepseek_v41 \
  --enable-auto-tool-choice \
  --trust-remote-code \
  --model-loader-extra-config '{"enable_multithread_load":true,"num_threads":128}' \
  --safetensors-load-strategy lazy \
  --quantization ascend \
  --additional-config '{"enable_cpu_binding":true,"ascend_compilation_config":{"enable_npugraph_ex":false,"enable_static_kernel":false}}' \
  --speculative-config '{"method":"dspark","num_speculative_tokens":5,"enforce_eager":true}' \
  --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}')sh";
  std::string node0 = cmd, node1 = cmd;
  node0.replace(node0.find("HEADLESS_ARGS"), 13, "");
  node1.replace(node1.find("HEADLESS_ARGS"), 13, "--headless --data-parallel-start-rank 1");
  EXPECT_EQ(refusals(serve(node0)), (Lines{tp(8), dp_size(4), kAscend, spec("dspark"),
                                           kTokenizerV41, kToolV41, kReasoningV41}));
  EXPECT_EQ(refusals(serve(node1)),
            (Lines{tp(8), dp_size(4), dp_start(1), kHeadless, kAscend, spec("dspark"),
                   kTokenizerV41, kToolV41, kReasoningV41}));
}

// §12.1, bounded-replay validation (the VLLM_USE_V2_MODEL_RUNNER=1 prefix is an environment
// variable, not an argument).
TEST_F(ServeArgsTest, DeepSeekV41BoundedReplay) {
  const Outcome o = serve(R"sh(@MODEL@ \
  --tokenizer-mode deepseek_v41 --served-model-name deepseek-v41-accuracy \
  --host 127.0.0.1 --port 8011 \
  --tensor-parallel-size 1 --data-parallel-size 4 --data-parallel-size-local 4 \
  --enable-expert-parallel --quantization deepseek_v4_fp8 \
  --max-model-len 16384 --max-num-batched-tokens 2048 --max-num-seqs 1 \
  --block-size 128 --enforce-eager --enable-prefix-caching --swa-bounded-replay \
  --limit-mm-per-prompt '{"image":0}' \
  --engram-config '{"cpu_offload":true,"dp_shared_memory":false}' \
  --model-loader-extra-config '{"enable_multithread_load":true,"num_threads":16}' \
  --safetensors-load-strategy lazy --additional-config '{"enable_cpu_binding":false}')sh");
  EXPECT_EQ(refusals(o),
            (Lines{dp_size(4), dp_local(4),
                   "--quantization deepseek_v4_fp8: DeepSeek-V4 FP8 checkpoints are not "
                   "supported yet",
                   kTokenizerV41, kEngram}));
  EXPECT_EQ(o.args->host, "127.0.0.1");
  EXPECT_TRUE(o.args->swa_bounded_replay);
  EXPECT_FALSE(has_note(*o.args, "--limit-mm-per-prompt"));  // 0 is implemented, not ignored
}

// ---- Qwen3.5-397B-A17B guide ("${MODEL_PATH}" → @MODEL@, "${local_ip}" → 10.0.0.2) ----

// §5.1, 950DT and A3 single node.
TEST_F(ServeArgsTest, Qwen35SingleNode) {
  const Outcome dt = serve(R"sh("@MODEL@" \
  --host 0.0.0.0 \
  --port 8000 \
  --distributed-executor-backend mp \
  --data-parallel-size 1 \
  --tensor-parallel-size 8 \
  --enable-expert-parallel \
  --seed 1024 \
  --quantization ascend \
  --served-model-name qwen3.5 \
  --max-num-seqs 128 \
  --max-model-len 133000 \
  --max-num-batched-tokens 8192 \
  --trust-remote-code \
  --enable-prefix-caching \
  --gpu-memory-utilization 0.90 \
  --async-scheduling \
  --speculative-config '{"method": "qwen3_5_mtp", "num_speculative_tokens": 3}' \
  --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
  --additional-config '{"enable_cpu_binding": true, "enable_fused_mc2": 1, "enable_flashcomm1": true}')sh");
  EXPECT_EQ(refusals(dt), (Lines{tp(8), kAscend, spec("qwen3_5_mtp")}));
  EXPECT_EQ(dt.args->parallel.distributed_executor_backend, "mp");

  const Outcome a3 = serve(R"sh("@MODEL@" \
  --host 0.0.0.0 \
  --port 8000 \
  --data-parallel-size 1 \
  --tensor-parallel-size 16 \
  --enable-expert-parallel \
  --seed 1024 \
  --quantization ascend \
  --served-model-name qwen3.5 \
  --max-num-seqs 128 \
  --max-model-len 133000 \
  --max-num-batched-tokens 16384 \
  --trust-remote-code \
  --gpu-memory-utilization 0.90 \
  --enable-prefix-caching \
  --speculative-config '{"method": "qwen3_5_mtp", "num_speculative_tokens": 3, "enforce_eager": true}' \
  --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
  --additional-config '{"enable_cpu_binding": true, "enable_fused_mc2": 1, "enable_flashcomm1": true}')sh");
  EXPECT_EQ(refusals(a3), (Lines{tp(16), kAscend, spec("qwen3_5_mtp")}));
}

// §5.2, two A2 nodes with a hub id as MODEL ($local_ip/$node0_ip → 10.0.0.1).
TEST_F(ServeArgsTest, Qwen35MultiNodeHubId) {
  const char* id = "Eco-Tech/Qwen3.5-397B-A17B-w8a8-mtp";
  const Outcome node0 = serve(R"sh(Eco-Tech/Qwen3.5-397B-A17B-w8a8-mtp \
  --host 0.0.0.0 \
  --port 8000 \
  --data-parallel-size 2 \
  --api-server-count 2 \
  --data-parallel-size-local 1 \
  --data-parallel-address 10.0.0.1 \
  --data-parallel-rpc-port 13389 \
  --seed 1024 \
  --served-model-name qwen3.5 \
  --tensor-parallel-size 8 \
  --enable-expert-parallel \
  --max-num-seqs 16 \
  --max-model-len 32768 \
  --max-num-batched-tokens 4096 \
  --trust-remote-code \
  --gpu-memory-utilization 0.90 \
  --no-enable-prefix-caching \
  --quantization ascend \
  --speculative-config '{"method": "qwen3_5_mtp", "num_speculative_tokens": 3}' \
  --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
  --additional-config '{"enable_cpu_binding":true, "multistream_overlap_shared_expert": true}')sh");
  EXPECT_EQ(refusals(node0),
            (Lines{hub(id), tp(8), dp_size(2),
                   "--api-server-count 2: more than one API server process is not supported yet "
                   "(planned with data parallelism)",
                   kAscend, spec("qwen3_5_mtp")}));

  const Outcome node1 = serve(R"sh(Eco-Tech/Qwen3.5-397B-A17B-w8a8-mtp \
  --host 0.0.0.0 \
  --port 8000 \
  --headless \
  --data-parallel-size 2 \
  --data-parallel-size-local 1 \
  --data-parallel-start-rank 1 \
  --data-parallel-address 10.0.0.1 \
  --data-parallel-rpc-port 13389 \
  --seed 1024 \
  --tensor-parallel-size 8 \
  --served-model-name qwen3.5 \
  --max-num-seqs 16 \
  --max-model-len 32768 \
  --max-num-batched-tokens 4096 \
  --enable-expert-parallel \
  --trust-remote-code \
  --gpu-memory-utilization 0.90 \
  --no-enable-prefix-caching \
  --quantization ascend \
  --speculative-config '{"method": "qwen3_5_mtp", "num_speculative_tokens": 3}' \
  --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
  --additional-config '{"enable_cpu_binding":true, "multistream_overlap_shared_expert": true}')sh");
  EXPECT_EQ(refusals(node1), (Lines{hub(id), tp(8), dp_size(2), dp_start(1), kHeadless, kAscend,
                                    spec("qwen3_5_mtp")}));
}

// §5.4 PD on 950DT: prefill DP1/TP8, decode DP2/TP4.
constexpr const char* kQwenPdPrefill = R"sh("@MODEL@" \
  --host "10.0.0.2" \
  --port 30060 \
  --data-parallel-size 1 \
  --data-parallel-size-local 1 \
  --tensor-parallel-size 8 \
  --enable-expert-parallel \
  --seed 1024 \
  --served-model-name qwen3.5 \
  --max-model-len 133120 \
  --max-num-batched-tokens 20480 \
  --max-num-seqs 64 \
  --enforce-eager \
  --trust-remote-code \
  --allowed-local-media-path / \
  --gpu-memory-utilization 0.90 \
  --quantization ascend \
  --enable-prefix-caching \
  --async-scheduling \
  --mm-processor-cache-gb 0 \
  --mm-encoder-tp-mode data \
  --distributed-executor-backend mp \
  --no-disable-hybrid-kv-cache-manager \
  --speculative-config '{"method":"qwen3_5_mtp","num_speculative_tokens":3}' \
  --additional-config '{
    "enable_flashcomm1": true,
    "ascend_compilation_config": {
      "enable_npugraph_ex": false,
      "enable_static_kernel": false
    },
    "weight_nz_mode": 1,
    "enable_cpu_binding": true,
    "enable_fused_mc2": 2,
    "enable_shared_expert_dp": true,
    "multistream_overlap_shared_expert": false,
    "scheduler_config": {
      "recompute_scheduler_enable": false
    }
  }' \
  --kv-transfer-config '{
    "kv_connector": "MooncakeConnectorV1",
    "kv_buffer_device": "npu",
    "kv_role": "kv_producer",
    "kv_port": "55220",
    "engine_id": "0",
    "kv_connector_extra_config": {
      "prefill": {
        "dp_size": 1,
        "tp_size": 8
      },
      "decode": {
        "dp_size": 2,
        "tp_size": 4
      }
    }
  }')sh";

TEST_F(ServeArgsTest, Qwen35PdPrefill) {
  const Outcome o = serve(kQwenPdPrefill);
  EXPECT_EQ(refusals(o), (Lines{tp(8), kAscend, spec("qwen3_5_mtp"), pd("MooncakeConnectorV1")}));
  EXPECT_FALSE(o.args->disable_hybrid_kv_cache_manager);
}

TEST_F(ServeArgsTest, Qwen35PdDecode) {
  const Outcome o = serve(R"sh("@MODEL@" \
  --host "10.0.0.2" \
  --port 30050 \
  --data-parallel-size 2 \
  --data-parallel-size-local 2 \
  --data-parallel-address "10.0.0.2" \
  --data-parallel-rpc-port 6884 \
  --api-server-count 1 \
  --tensor-parallel-size 4 \
  --enable-expert-parallel \
  --seed 1024 \
  --served-model-name qwen3.5 \
  --max-model-len 133120 \
  --max-num-batched-tokens 300 \
  --max-num-seqs 100 \
  --trust-remote-code \
  --allowed-local-media-path / \
  --gpu-memory-utilization 0.90 \
  --quantization ascend \
  --enable-prefix-caching \
  --async-scheduling \
  --mm-processor-cache-gb 0 \
  --mm-encoder-tp-mode data \
  --distributed-executor-backend mp \
  --no-disable-hybrid-kv-cache-manager \
  --speculative-config '{"method":"qwen3_5_mtp","num_speculative_tokens":3}' \
  --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
  --additional-config '{
    "enable_flashcomm1": true,
    "ascend_compilation_config": {
      "enable_npugraph_ex": true,
      "enable_static_kernel": false
    },
    "weight_nz_mode": 1,
    "enable_cpu_binding": true,
    "enable_fused_mc2": 2,
    "enable_shared_expert_dp": true,
    "multistream_overlap_shared_expert": false,
    "scheduler_config": {
      "recompute_scheduler_enable": true
    }
  }' \
  --kv-transfer-config '{
    "kv_connector": "MooncakeConnectorV1",
    "kv_buffer_device": "npu",
    "kv_role": "kv_consumer",
    "kv_port": "56010",
    "engine_id": "2",
    "kv_connector_extra_config": {
      "prefill": {
        "dp_size": 1,
        "tp_size": 8
      },
      "decode": {
        "dp_size": 2,
        "tp_size": 4
      }
    }
  }')sh");
  EXPECT_EQ(refusals(o), (Lines{tp(4), dp_size(2), dp_local(2), kAscend, spec("qwen3_5_mtp"),
                                pd("MooncakeConnectorV1"), recompute(true)}));
}

// §5.5 PD on A3 with the MXFP8 KV cache and the V2 connector.
TEST_F(ServeArgsTest, Qwen35PdMxfp8) {
  const Outcome prefill = serve(R"sh("@MODEL@" \
  --host "10.0.0.2" \
  --port 30060 \
  --data-parallel-size 1 \
  --data-parallel-size-local 1 \
  --tensor-parallel-size 8 \
  --enable-expert-parallel \
  --seed 1024 \
  --served-model-name qwen3.5 \
  --max-model-len 133120 \
  --max-num-batched-tokens 20480 \
  --max-num-seqs 64 \
  --enforce-eager \
  --trust-remote-code \
  --allowed-local-media-path / \
  --gpu-memory-utilization 0.90 \
  --quantization ascend \
  --kv-cache-dtype mxfp8 \
  --enable-prefix-caching \
  --async-scheduling \
  --mm-processor-cache-gb 0 \
  --mm-encoder-tp-mode data \
  --distributed-executor-backend mp \
  --no-disable-hybrid-kv-cache-manager \
  --speculative-config '{"method":"qwen3_5_mtp","num_speculative_tokens":3,"enforce_eager":true}' \
  --additional-config '{
    "enable_flashcomm1": true,
    "ascend_compilation_config": {
      "enable_npugraph_ex": false,
      "enable_static_kernel": false
    },
    "weight_nz_mode": 1,
    "enable_cpu_binding": true,
    "enable_fused_mc2": 0,
    "enable_prefill_mc2": false,
    "enable_shared_expert_dp": true,
    "multistream_overlap_shared_expert": false,
    "scheduler_config": {
      "recompute_scheduler_enable": false
    }
  }' \
  --kv-transfer-config '{
    "kv_connector": "MooncakeConnectorV2",
    "kv_buffer_device": "npu",
    "kv_role": "kv_producer",
    "kv_port": "55220",
    "engine_id": "0",
    "kv_connector_extra_config": {
      "ascend_local_comm_res_path": "/etc/hixlep",
      "prefill": {
        "dp_size": 1,
        "tp_size": 8
      },
      "decode": {
        "dp_size": 2,
        "tp_size": 4
      }
    }
  }')sh");
  EXPECT_EQ(refusals(prefill),
            (Lines{kMxfp8, tp(8), kAscend, spec("qwen3_5_mtp"), pd("MooncakeConnectorV2")}));

  const Outcome decode = serve(R"sh("@MODEL@" \
  --host "10.0.0.2" \
  --port 30050 \
  --data-parallel-size 2 \
  --data-parallel-size-local 2 \
  --data-parallel-address "10.0.0.2" \
  --data-parallel-rpc-port 6884 \
  --api-server-count 1 \
  --tensor-parallel-size 4 \
  --enable-expert-parallel \
  --seed 1024 \
  --served-model-name qwen3.5 \
  --max-model-len 133120 \
  --max-num-batched-tokens 300 \
  --max-num-seqs 100 \
  --trust-remote-code \
  --allowed-local-media-path / \
  --gpu-memory-utilization 0.90 \
  --quantization ascend \
  --kv-cache-dtype mxfp8 \
  --enable-prefix-caching \
  --async-scheduling \
  --mm-processor-cache-gb 0 \
  --mm-encoder-tp-mode data \
  --distributed-executor-backend mp \
  --no-disable-hybrid-kv-cache-manager \
  --speculative-config '{"method":"qwen3_5_mtp","num_speculative_tokens":3,"enforce_eager":true}' \
  --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
  --additional-config '{
    "enable_flashcomm1": true,
    "ascend_compilation_config": {
      "enable_npugraph_ex": true,
      "enable_static_kernel": false
    },
    "weight_nz_mode": 1,
    "enable_cpu_binding": true,
    "enable_fused_mc2": 0,
    "enable_prefill_mc2": false,
    "enable_shared_expert_dp": true,
    "multistream_overlap_shared_expert": false,
    "scheduler_config": {
      "recompute_scheduler_enable": true
    }
  }' \
  --kv-transfer-config '{
    "kv_connector": "MooncakeConnectorV2",
    "kv_buffer_device": "npu",
    "kv_role": "kv_consumer",
    "kv_port": "56010",
    "engine_id": "2",
    "kv_connector_extra_config": {
      "ascend_local_comm_res_path": "/etc/hixlep",
      "prefill": {
        "dp_size": 1,
        "tp_size": 8
      },
      "decode": {
        "dp_size": 2,
        "tp_size": 4
      }
    }
  }')sh");
  EXPECT_EQ(refusals(decode),
            (Lines{kMxfp8, tp(4), dp_size(2), dp_local(2), kAscend, spec("qwen3_5_mtp"),
                   pd("MooncakeConnectorV2"), recompute(true)}));
}

// §5.6 PD on A2 with the W4A8 hub id, as `bash run_p.sh 0,…,7 30060 1 0 IP 6884 8` and
// `bash run_d.sh 0,…,7 30050 1 0 IP 6884 8` start them.
TEST_F(ServeArgsTest, Qwen35PdA2HubId) {
  const char* id = "Eco-Tech/Qwen3.5-397B-A17B-w4a8-mtp";
  const Outcome prefill = serve(R"sh(Eco-Tech/Qwen3.5-397B-A17B-w4a8-mtp \
  --host "10.0.0.2" \
  --port "30060" \
  --data-parallel-size "1" \
  --data-parallel-size-local 1 \
  --tensor-parallel-size "8" \
  --enable-expert-parallel \
  --seed 1024 \
  --served-model-name qwen3.5 \
  --max-model-len 133120 \
  --max-num-batched-tokens 16384 \
  --max-num-seqs 64 \
  --enforce-eager \
  --trust-remote-code \
  --allowed-local-media-path / \
  --gpu-memory-utilization 0.90 \
  --quantization ascend \
  --enable-prefix-caching \
  --async-scheduling \
  --mm-processor-cache-gb 0 \
  --mm-encoder-tp-mode data \
  --distributed-executor-backend mp \
  --no-disable-hybrid-kv-cache-manager \
  --speculative-config '{"method":"qwen3_5_mtp","num_speculative_tokens":3}' \
  --additional-config '{"enable_flashcomm1":true,"ascend_compilation_config":{"enable_npugraph_ex":false,"enable_static_kernel":false}, "weight_nz_mode":1, "enable_shared_expert_dp":true,"scheduler_config":{"recompute_scheduler_enable":false}}' \
  --kv-transfer-config '{"kv_connector":"MooncakeConnectorV1","kv_buffer_device":"npu","kv_role":"kv_producer","kv_port":"55220","engine_id":"0","kv_connector_extra_config":{"prefill":{"dp_size":1,"tp_size":8},"decode":{"dp_size":1,"tp_size":8}}}')sh");
  EXPECT_EQ(refusals(prefill),
            (Lines{hub(id), tp(8), kAscend, spec("qwen3_5_mtp"), pd("MooncakeConnectorV1")}));

  const Outcome decode = serve(R"sh(Eco-Tech/Qwen3.5-397B-A17B-w4a8-mtp \
  --host "10.0.0.3" \
  --port "30050" \
  --data-parallel-size "1" \
  --data-parallel-size-local 1 \
  --data-parallel-rank "0" \
  --data-parallel-address "10.0.0.3" \
  --data-parallel-rpc-port "6884" \
  --tensor-parallel-size "8" \
  --enable-expert-parallel \
  --seed 1024 \
  --served-model-name qwen3.5 \
  --max-model-len 133120 \
  --max-num-batched-tokens 300 \
  --max-num-seqs 200 \
  --trust-remote-code \
  --allowed-local-media-path / \
  --gpu-memory-utilization 0.90 \
  --quantization ascend \
  --enable-prefix-caching \
  --async-scheduling \
  --mm-processor-cache-gb 0 \
  --mm-encoder-tp-mode data \
  --distributed-executor-backend mp \
  --no-disable-hybrid-kv-cache-manager \
  --speculative-config '{"method":"qwen3_5_mtp","num_speculative_tokens":3}' \
  --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
  --additional-config '{"ascend_compilation_config":{"enable_npugraph_ex":true,"enable_static_kernel":false}, "weight_nz_mode":1, "enable_shared_expert_dp":false, "scheduler_config":{"recompute_scheduler_enable":true}}' \
  --kv-transfer-config '{"kv_connector":"MooncakeConnectorV1","kv_buffer_device":"npu","kv_role":"kv_consumer","kv_port":"56010","engine_id":"2","kv_connector_extra_config":{"prefill":{"dp_size":1,"tp_size":8},"decode":{"dp_size":1,"tp_size":8}}}')sh");
  EXPECT_EQ(refusals(decode), (Lines{hub(id), tp(8), kAscend, spec("qwen3_5_mtp"),
                                     pd("MooncakeConnectorV1"), recompute(true)}));
  EXPECT_EQ(decode.args->parallel.data_parallel_rank, 0);
}

// §6.1: the tool-calling options appended to a serve command: all implemented.
TEST_F(ServeArgsTest, Qwen35ToolCallingOptions) {
  const Outcome o = serve(
      "@MODEL@ --enable-auto-tool-choice --tool-call-parser qwen3_coder --reasoning-parser qwen3");
  EXPECT_EQ(refusals(o), Lines{});
  EXPECT_TRUE(o.args->enable_auto_tool_choice);
  EXPECT_EQ(o.args->tool_call_parser, "qwen3_coder");
  EXPECT_EQ(o.args->reasoning_parser, "qwen3");
}

// The §5.4 prefill command without its planned features (TP, quantization, MTP, PD) starts,
// and says which settings have no effect.
TEST_F(ServeArgsTest, SeedWithoutPlannedFeaturesIsAccepted) {
  std::string cmd = kQwenPdPrefill;
  for (const char* drop :
       {"--tensor-parallel-size 8 \\\n", "--quantization ascend \\\n",
        "--speculative-config '{\"method\":\"qwen3_5_mtp\",\"num_speculative_tokens\":3}' \\\n"}) {
    const size_t at = cmd.find(drop);
    ASSERT_NE(at, std::string::npos) << drop;
    cmd.erase(at, std::string(drop).size());
  }
  cmd.erase(cmd.find(" \\\n  --kv-transfer-config"));
  const Outcome o = accepted(cmd);
  const ServeArgs& a = *o.args;
  EXPECT_EQ(a.engine.model, model());
  EXPECT_EQ(a.host, "10.0.0.2");
  EXPECT_EQ(a.port, 30060);
  EXPECT_EQ(a.served_model_names, (std::vector<std::string>{"qwen3.5"}));
  EXPECT_EQ(a.engine.max_model_len, 133120);
  EXPECT_EQ(a.engine.max_num_batched_tokens, 20480);
  EXPECT_EQ(a.engine.max_num_seqs, 64);
  EXPECT_TRUE(a.engine.enable_prefix_caching);
  for (const char* flag : {"--enforce-eager", "--allowed-local-media-path", "--async-scheduling",
                           "--mm-processor-cache-gb", "--mm-encoder-tp-mode",
                           "--enable-expert-parallel", "--additional-config"})
    EXPECT_TRUE(has_note(a, flag)) << flag;
  EXPECT_FALSE(has_note(a, "--trust-remote-code"));  // implemented: nothing to run
  EXPECT_EQ(a.notes.size(), 7u);
  EXPECT_TRUE(a.warnings.empty());
}

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
  EXPECT_EQ(refusals(dp), Lines{dp_size(2)});
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
  EXPECT_EQ(a.speculative_config, "{\"num_speculative_tokens\":0}");
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
  EXPECT_EQ(refusals(serve(R"(@MODEL@ --speculative-config '{"model":"/draft"}')")),
            Lines{"--speculative-config: unknown key 'model'"});
  EXPECT_EQ(refusals(serve(R"(@MODEL@ --limit-mm-per-prompt '{"image":-1}')")),
            Lines{"--limit-mm-per-prompt: 'image' must be a non-negative integer"});
  EXPECT_EQ(refusals(serve(R"(@MODEL@ --additional-config '{"enable_cpu_binding":"yes"}')")),
            Lines{"--additional-config: 'enable_cpu_binding' must be true or false"});
}

TEST_F(ServeArgsTest, JsonFlagValuesAndNeutralValues) {
  // kv_port as a number; a connector Kestrel does not know.
  EXPECT_EQ(
      refusals(serve(
          R"(@MODEL@ --kv-transfer-config '{"kv_connector":"MooncakeConnectorV1","kv_port":30000}')")),
      Lines{pd("MooncakeConnectorV1")});
  EXPECT_EQ(refusals(serve(R"(@MODEL@ --kv-transfer-config '{"kv_connector":"NixlConnector"}')")),
            Lines{"--kv-transfer-config: unknown KV connector 'NixlConnector' "
                  "(MooncakeConnectorV1, MooncakeConnectorV2, MooncakeHybridConnector)"});
  EXPECT_EQ(refusals(serve(R"(@MODEL@ --kv-transfer-config '{"kv_role":"kv_producer"}')")),
            Lines{"--kv-transfer-config: missing key 'kv_connector'"});
  // Neutral: nothing to speculate, no connector.
  accepted(R"(@MODEL@ --speculative-config '{}' --kv-transfer-config '{}')");
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

TEST_F(ServeArgsTest, RefusedParallelAndBackendValues) {
  EXPECT_EQ(refusals(serve("@MODEL@ --api-server-count 3")),
            Lines{"--api-server-count 3: more than one API server process is not supported yet "
                  "(planned with data parallelism)"});
  EXPECT_EQ(refusals(serve("@MODEL@ --distributed-executor-backend external_launcher")),
            Lines{"--distributed-executor-backend external_launcher: not supported; Kestrel "
                  "starts its own worker processes (use mp)"});
  EXPECT_NE(serve("@MODEL@ --distributed-executor-backend bogus").cli_error, "");
  EXPECT_NE(serve("@MODEL@ --tensor-parallel-size 0").cli_error, "");
}

TEST_F(ServeArgsTest, ParserFlags) {
  EXPECT_EQ(refusals(serve("@MODEL@ --tool-call-parser hermes")), Lines{});
  for (const char* name : {"qwen3", "deepseek_r1", "deepseek_v3", "deepseek_v31"})
    EXPECT_EQ(refusals(serve(std::string("@MODEL@ --reasoning-parser ") + name)), Lines{}) << name;
  EXPECT_EQ(refusals(serve("@MODEL@ --reasoning-parser granite")),
            Lines{"--reasoning-parser granite: not supported (qwen3, deepseek_r1, deepseek_v3, "
                  "deepseek_v31)"});
  EXPECT_EQ(refusals(serve("@MODEL@ --enable-auto-tool-choice")),
            Lines{"--enable-auto-tool-choice: needs --tool-call-parser"});
}

TEST_F(ServeArgsTest, PrecisionAndFormatValues) {
  EXPECT_EQ(accepted("@MODEL@ --dtype half").args->engine.dtype, "half");
  accepted("@MODEL@ --kv-cache-dtype bfloat16 --load-format gguf --tokenizer-mode hf");
  EXPECT_EQ(refusals(serve("@MODEL@ --dtype float8")),
            Lines{"--dtype float8: not supported (auto, float16, bfloat16, float32)"});
  EXPECT_EQ(refusals(serve("@MODEL@ --kv-cache-dtype fp8_e5m2")),
            Lines{"--kv-cache-dtype fp8_e5m2: FP8 KV cache is not supported yet (use auto, "
                  "bfloat16 or float16)"});
  EXPECT_EQ(refusals(serve("@MODEL@ --quantization awq")),
            Lines{"--quantization awq: not supported (Kestrel reads a GGUF file's quantization "
                  "from the file, and FP8 block-quantized checkpoints from config.json; planned: "
                  "ascend, deepseek_v4_fp8)"});
  // FP8 block checkpoints are read; serve checks the checkpoint after loading it.
  EXPECT_EQ(accepted("@MODEL@ --quantization fp8").args->quantization, "fp8");
  EXPECT_EQ(refusals(serve("@MODEL@ --tokenizer-mode mistral")),
            Lines{"--tokenizer-mode mistral: not supported (auto, hf)"});
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
        refusal("@MODEL@ --kv-cache-dtype mxfp8"), refusal("@MODEL@ --tokenizer-mode deepseek_v41"),
        refusal(R"(@MODEL@ --engram-config '{"cpu_offload":true}')"),
        refusal(R"(@MODEL@ --kv-transfer-config '{"kv_connector":"X"}')"),
        refusal("@MODEL@ --tensor-parallel-size 4"), refusal("@MODEL@ --headless"),
        refusal("@MODEL@ --quantization X"), refusal("@MODEL@ --tokenizer-mode X"),
        refusal("@MODEL@ --chat-template X"),
        refusal(R"(@MODEL@ --speculative-config '{"method":"mtp"}')"),
        refusal(R"(@MODEL@ --kv-transfer-config '{"kv_connector":"MooncakeConnectorV1"}')"),
        hub_text})
    EXPECT_NE(doc->find(text), std::string::npos) << text;
}

}  // namespace
}  // namespace kestrel::cli
