"""The DeepSeek-V3.1 guide's single-node command line (§5.1: DP4 x TP4, expert parallelism, MTP
speculative decoding), and its two-node form (§5.2: two DP ranks of TP4 on each node, the second
node --headless, here in a network namespace joined by a veth pair), with the model path
replaced by the DeepSeek-V3 fixture, served by
`kestrel serve` as written except for three flags: `--quantization ascend` (the quantized-serving
issue), `--max-model-len 16384` (the fixture was made with 256 positions; 256 here) and
`--gpu-memory-utilization 0.92` (on the CPU the 16 ranks share this machine's RAM, and 0.92 of it
is more than a test may take: `--kv-cache-memory 16M` per rank instead). The
engines start (16 ranks: 4 data-parallel engines of 4 processes, the routed experts spread over
all 16 and exchanged between the engines, which step in lockstep), answer transformers' greedy
tokens under concurrency, draft with the MTP layer, and stop on SIGTERM."""

import concurrent.futures
import json
import subprocess

import kestrel_e2e
from kestrel_e2e import KESTREL_BIN, REPO, metric, post_json, scrape

FIXTURE = REPO / "tests" / "fixtures" / "models" / "deepseek_v3_bf16"
# §5.1 as the guide writes it, host/port aside (the harness picks them).
GUIDE_FLAGS = ["--data-parallel-size", "4", "--tensor-parallel-size", "4", "--seed", "1024",
               "--served-model-name", "deepseek_v3", "--enable-expert-parallel",
               "--max-num-seqs", "16", "--max-num-batched-tokens", "4096", "--trust-remote-code",
               "--no-enable-prefix-caching", "--speculative-config", '{"num_speculative_tokens": 3, "method": "mtp"}',
               "--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY"}']


# §5.2 on both nodes, host/port aside and $node0_ip filled in by the test.
TWO_NODE_FLAGS = ["--data-parallel-size", "4", "--data-parallel-size-local", "2",
                  "--data-parallel-rpc-port", "13389", "--tensor-parallel-size", "4", "--seed",
                  "1024", "--served-model-name", "deepseek_v3", "--enable-expert-parallel",
                  "--max-num-seqs", "16", "--max-num-batched-tokens", "4096", "--trust-remote-code",
                  "--no-enable-prefix-caching",
                  "--speculative-config", '{"num_speculative_tokens": 3, "method": "mtp"}',
                  "--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY"}']
# What the fixture and this machine change: the context it was made with, and a KV pool per rank
# instead of 0.92 of the RAM the 16 ranks share.
MACHINE_FLAGS = ["--max-model-len", "256", "--kv-cache-memory", "16M"]


def check_serves_golden(srv):
    golden = json.loads((FIXTURE / "golden.json").read_text())

    def greedy(prompt):
        status, body = post_json(srv.base_url, "/v1/completions", {
            "model": "deepseek_v3", "prompt": prompt, "max_tokens": len(golden["greedy"][0]),
            "temperature": 0, "ignore_eos": True, "logprobs": 0})
        assert status == 200, body
        return [int(t.split(":")[1]) for t in body["choices"][0]["logprobs"]["tokens"]]

    with concurrent.futures.ThreadPoolExecutor(len(golden["prompts"])) as pool:
        assert list(pool.map(greedy, golden["prompts"])) == golden["greedy"]
    samples = scrape(srv.base_url)
    assert metric(samples, "vllm:spec_decode_num_drafts_total") > 0
    engines = [metric(samples, "vllm:generation_tokens_total", engine=str(e)) for e in range(4)]
    assert sum(engines) == len(golden["prompts"]) * len(golden["greedy"][0]), engines


def test_deepseek_v31_two_node_command_serves_the_fixture(start_server, netns, monkeypatch,
                                                          tmp_path):
    ns, node0_ip, _ = netns
    monkeypatch.setattr(kestrel_e2e, "BASE_FLAGS", ["--threads", "2"])
    log = open(tmp_path / "node1.log", "w")
    node1 = subprocess.Popen(
        ["ip", "netns", "exec", ns, str(KESTREL_BIN), "serve", str(FIXTURE), "--host", "0.0.0.0",
         "--port", "8004", "--headless", "--data-parallel-start-rank", "2",
         "--data-parallel-address", node0_ip, *TWO_NODE_FLAGS, *MACHINE_FLAGS, "--threads", "2"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        srv = start_server("--data-parallel-address", node0_ip, *TWO_NODE_FLAGS, *MACHINE_FLAGS,
                           model_path=FIXTURE)
        head_log = srv.log()
        assert "data-parallel rank 3 joined" in head_log, head_log[-3000:]
        assert f"the group meets at tcp://{node0_ip}:13389" in head_log
        check_serves_golden(srv)
    finally:
        if node1.poll() is None:
            node1.kill()
        node1.wait()


def test_deepseek_v31_single_node_command_serves_the_fixture(start_server, monkeypatch):
    monkeypatch.setattr(kestrel_e2e, "BASE_FLAGS", ["--threads", "2"])
    srv = start_server(*GUIDE_FLAGS, "--max-model-len", "256", "--kv-cache-memory", "16M",
                       model_path=FIXTURE)
    log = srv.log()
    assert "4 data-parallel ranks of 4 tensor-parallel ranks (13 processes)" in log, log[-3000:]
    # The experts over all 16 ranks (8 experts: half the ranks hold none), the engines in lockstep.
    assert "expert parallelism across 4 data-parallel ranks: the group meets at ipc://" in log
    check_serves_golden(srv)
