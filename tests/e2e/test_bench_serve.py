"""`kestrel bench serve` end to end: against `kestrel serve` on the default model (results block,
saved JSON with vLLM's keys, exact input lengths), and against a port nobody listens on (every
request counted as failed, the run ends)."""

import json
import socket
import subprocess

from kestrel_e2e import KESTREL_BIN, MODEL_PATH


def run_bench(*args, timeout=300):
    return subprocess.run([str(KESTREL_BIN), "bench", "serve", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_bench_serve_against_kestrel(base_url, model, tmp_path):
    # Prefixes of long flags work as in argparse (--random-input for --random-input-len).
    r = run_bench("--base-url", base_url, "--tokenizer", str(MODEL_PATH), "--dataset-name", "random",
                  "--random-input", "32", "--random-output-len", "8", "--num-prompts", "8",
                  "--max-concurrency", "4", "--save-result", "--result-dir", str(tmp_path),
                  "--result-filename", "out.json", "--metric-percentiles", "50,99",
                  "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "============ Serving Benchmark Result ============" in out
    for line in ("Successful requests:", "Failed requests:", "Maximum request concurrency:",
                 "Benchmark duration (s):", "Total input tokens:", "Total generated tokens:",
                 "Request throughput (req/s):", "Output token throughput (tok/s):",
                 "Mean TTFT (ms):", "P99 TPOT (ms):", "Median ITL (ms):", "P50 E2EL (ms):"):
        assert line in out, (line, out)
    res = json.loads((tmp_path / "out.json").read_text())
    assert res["completed"] == 8 and res["model_id"] == model
    assert res["total_output_tokens"] == 8 * 8  # ignore_eos for the random dataset
    assert res["max_concurrency"] == 4
    # Exact input lengths: SmolLM2's tokenizer adds no special tokens, so 32 tokens each.
    assert res["input_lens"] == [32] * 8 and res["total_input_tokens"] == 256
    for key in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "std_itl_ms",
                "mean_e2el_ms", "request_throughput", "output_throughput"):
        assert key in res, key
    assert len(res["ttfts"]) == 8 and all(t > 0 for t in res["ttfts"])

    # bench compare reads the saved result back: a table and a script-free HTML report.
    html = tmp_path / "report.html"
    c = subprocess.run([str(KESTREL_BIN), "bench", "compare", str(tmp_path / "out.json"),
                        str(tmp_path / "out.json"), "--html", str(html)],
                       capture_output=True, text=True, timeout=60)
    assert c.returncode == 0, c.stderr
    assert "Output token throughput (tok/s)" in c.stdout and "out.json" in c.stdout
    page = html.read_text()
    assert page.count("<polyline") == 4 and "<script" not in page


def test_bench_serve_uses_the_servers_tokenizer_by_default(base_url, tmp_path):
    # No --tokenizer and no --model: the model comes from /v1/models and prompts are built
    # through the server's /tokenize and /detokenize, still with exact lengths.
    r = run_bench("--base-url", base_url, "--random-input-len", "24", "--random-output-len", "4",
                  "--num-prompts", "6", "--max-concurrency", "3", "--save-result",
                  "--result-dir", str(tmp_path), "--result-filename", "remote.json",
                  "--disable-tqdm")
    assert r.returncode == 0, r.stderr
    res = json.loads((tmp_path / "remote.json").read_text())
    assert res["tokenizer_id"] == "server:/tokenize"
    assert res["completed"] == 6 and res["input_lens"] == [24] * 6


def test_bench_serve_counts_failures_and_finishes():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there now
    r = run_bench("--host", "127.0.0.1", "--port", str(port), "--model", "m", "--tokenizer",
                  str(MODEL_PATH), "--random-input-len", "8", "--random-output-len", "4",
                  "--num-prompts", "5", "--disable-tqdm", timeout=60)
    assert r.returncode == 1
    assert "Successful requests:                     0" in r.stdout
    assert "Failed requests:                         5" in r.stdout
