// `kestrel serve` with every command line of the Qwen3.5-397B-A17B deployment guide
// (../shared/seeds/): each parses to the outcome docs/compatibility.md documents.
#include "cli/serve_args_fixture.h"

namespace kestrel::cli::serve_test {
namespace {

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
  EXPECT_EQ(refusals(dt), (Lines{}));
  EXPECT_EQ(dt.args->engine.distributed_executor_backend, "mp");

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
  EXPECT_EQ(refusals(a3), (Lines{}));
  // qwen3_5_mtp (an alias of mtp) is accepted here; the engine checks it against the model.
  EXPECT_EQ(a3.args->engine.speculative_config,
            R"({"method": "qwen3_5_mtp", "num_speculative_tokens": 3, "enforce_eager": true})");
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
  EXPECT_EQ(refusals(node0), (Lines{hub(id)}));
  EXPECT_EQ(node0.args->api_server_count, 2);

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
  EXPECT_EQ(refusals(node1), (Lines{hub(id)}));
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
  EXPECT_EQ(refusals(o), (Lines{}));
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
  EXPECT_EQ(refusals(o), (Lines{}));
  EXPECT_TRUE(o.args->engine.give_back_preempted);
  EXPECT_EQ(o.args->engine.kv->transfer.decode->tp_size, 4);
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
  EXPECT_EQ(refusals(prefill), Lines{});
  EXPECT_EQ(prefill.args->engine.kv_cache_dtype, "mxfp8");

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
  EXPECT_EQ(refusals(decode), Lines{});
  EXPECT_EQ(decode.args->engine.kv_cache_dtype, "mxfp8");
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
  EXPECT_EQ(refusals(prefill), (Lines{hub(id)}));

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
  EXPECT_EQ(refusals(decode), (Lines{hub(id)}));
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

}  // namespace
}  // namespace kestrel::cli::serve_test
