"""The DeepSeek-V3.1 guide's single-node command line (§5.1: DP4 x TP4, expert parallelism, MTP
speculative decoding) with the model path replaced by the DeepSeek-V3 fixture, served by
`kestrel serve` as written except for three flags: `--quantization ascend` (the quantized-serving
issue), `--max-model-len 16384` (the fixture was made with 256 positions; 256 here) and
`--gpu-memory-utilization 0.92` (on the CPU the 16 ranks share this machine's RAM, and 0.92 of it
is more than a test may take: `--kv-cache-memory 16M` per rank instead). The
engines start (16 ranks: 4 data-parallel engines of 4 processes, the routed experts spread over
all 16 and exchanged between the engines, which step in lockstep), answer transformers' greedy
tokens under concurrency, draft with the MTP layer, and stop on SIGTERM."""

import concurrent.futures
import json

import kestrel_e2e
from kestrel_e2e import REPO, metric, post_json, scrape

FIXTURE = REPO / "tests" / "fixtures" / "models" / "deepseek_v3_bf16"
# §5.1 as the guide writes it, host/port aside (the harness picks them).
GUIDE_FLAGS = ["--data-parallel-size", "4", "--tensor-parallel-size", "4", "--seed", "1024",
               "--served-model-name", "deepseek_v3", "--enable-expert-parallel",
               "--max-num-seqs", "16", "--max-num-batched-tokens", "4096", "--trust-remote-code",
               "--no-enable-prefix-caching", "--speculative-config", '{"num_speculative_tokens": 3, "method": "mtp"}',
               "--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY"}']


def test_deepseek_v31_single_node_command_serves_the_fixture(start_server, monkeypatch):
    golden = json.loads((FIXTURE / "golden.json").read_text())
    monkeypatch.setattr(kestrel_e2e, "BASE_FLAGS", ["--threads", "2"])
    srv = start_server(*GUIDE_FLAGS, "--max-model-len", "256", "--kv-cache-memory", "16M",
                       model_path=FIXTURE)
    log = srv.log()
    assert "4 data-parallel ranks of 4 tensor-parallel ranks (13 processes)" in log, log[-3000:]
    # The experts over all 16 ranks (8 experts: half the ranks hold none), the engines in lockstep.
    assert "expert parallelism across 4 data-parallel ranks: the group meets at ipc://" in log

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
