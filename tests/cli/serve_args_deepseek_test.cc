// `kestrel serve` with every command line of the DeepSeek-V3.1 and DeepSeek-V4.1-Flash
// deployment guides (../shared/seeds/): each parses to the outcome docs/compatibility.md documents.
#include "cli/serve_args_fixture.h"

namespace kestrel::cli::serve_test {
namespace {

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
  EXPECT_EQ(refusals(o), (Lines{}));
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
  EXPECT_TRUE(a.engine.enable_expert_parallel);
  // MTP is accepted; the engine checks it against the model's MTP layers at start-up.
  EXPECT_EQ(a.engine.speculative_config, R"({"num_speculative_tokens": 3, "method": "mtp"})");
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
  EXPECT_EQ(refusals(node0), (Lines{}));
  EXPECT_EQ(node0.args->parallel.data_parallel_address, "10.0.0.1");
  EXPECT_EQ(node0.args->parallel.data_parallel_rpc_port, 13389);
  // The head runs ranks 0 and 1 and waits for 2 and 3 at 10.0.0.1:13391 and :13392.
  EXPECT_EQ(node0.args->engine.data_parallel_first, 0);
  EXPECT_EQ(node0.args->engine.data_parallel_count, 2);
  EXPECT_EQ(node0.args->engine.data_parallel_remote, 2);
  EXPECT_EQ(node0.args->engine.data_parallel_address, "10.0.0.1");
  EXPECT_EQ(node0.args->engine.data_parallel_rpc_port, 13389);

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
  EXPECT_EQ(refusals(node1), (Lines{}));
  EXPECT_EQ(node1.args->engine.data_parallel_first, 2);
  EXPECT_EQ(node1.args->engine.data_parallel_count, 2);
  EXPECT_EQ(node1.args->engine.data_parallel_remote, 0);
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
  EXPECT_EQ(refusals(p0), (Lines{}));
  ASSERT_TRUE(p0.args->engine.kv.has_value());
  EXPECT_EQ(p0.args->engine.kv->transfer.role, KvRole::kProducer);
  EXPECT_EQ(p0.args->engine.kv->transfer.prefill->tp_size, 8);
  EXPECT_FALSE(p0.args->engine.give_back_preempted);
  EXPECT_TRUE(has_note(*p0.args, "--enforce-eager"));
  const Outcome p1 = serve(with("1", "30100"));
  EXPECT_EQ(refusals(p1), (Lines{}));
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
  EXPECT_EQ(refusals(serve(d0)), (Lines{}));
  const Outcome o = serve(d1);
  EXPECT_EQ(refusals(o), (Lines{}));
  // The recompute scheduler on a decode instance: requests it has no blocks for go back.
  ASSERT_TRUE(o.args->engine.kv.has_value());
  EXPECT_EQ(o.args->engine.kv->transfer.role, KvRole::kConsumer);
  EXPECT_EQ(o.args->engine.kv->transfer.kv_port, 30200);
  EXPECT_TRUE(o.args->engine.give_back_preempted);
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
  EXPECT_EQ(refusals(o), (Lines{kTokenizerV41, kToolV41, kReasoningV41, kEngram}));
  EXPECT_EQ(o.args->engine.block_size, 128);
  EXPECT_EQ(o.args->engine.max_model_len, 150000);
  // Experts over all 16 ranks, as vLLM shards them: nothing to warn about.
  EXPECT_EQ(o.args->warnings, Lines{});
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
  EXPECT_EQ(refusals(o), (Lines{kDspark, kTokenizerV41, kToolV41, kReasoningV41, kEngram}));
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
  EXPECT_EQ(refusals(o), (Lines{kDspark, kTokenizerV41, kToolV41, kReasoningV41, kEngram}));
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
  EXPECT_EQ(refusals(serve(node0)), (Lines{kDspark, kTokenizerV41, kToolV41, kReasoningV41}));
  EXPECT_EQ(refusals(serve(node1)), (Lines{kDspark, kTokenizerV41, kToolV41, kReasoningV41}));
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
            (Lines{"--quantization deepseek_v4_fp8: DeepSeek-V4 FP8 checkpoints are not "
                   "supported yet",
                   kTokenizerV41, kEngram}));
  EXPECT_EQ(o.args->host, "127.0.0.1");
  EXPECT_TRUE(o.args->swa_bounded_replay);
  EXPECT_FALSE(has_note(*o.args, "--limit-mm-per-prompt"));  // 0 is implemented, not ignored
}

}  // namespace
}  // namespace kestrel::cli::serve_test
