"""KESTREL_CPU_ISA caps the SIMD kernels a process uses (to run an AVX2-only or scalar machine's
code path here); every path computes the same arithmetic, so the model generates the same
greedy tokens on each (tests/model/cpu_isa_logits_test.cc checks the logits' bits)."""

import os
import subprocess

from kestrel_e2e import KESTREL_BIN, MODEL_PATH

PROMPTS = [
    "Name the capital city of France.",
    "Write a haiku about the sea.",
    "def quicksort(xs):",
]


def generate(isa, prompt):
    env = dict(os.environ)
    if isa:
        env["KESTREL_CPU_ISA"] = isa
    else:
        env.pop("KESTREL_CPU_ISA", None)
    r = subprocess.run([str(KESTREL_BIN), "generate", "-m", str(MODEL_PATH), "-p", prompt,
                        "-n", "48", "--temperature", "0", "--ignore-eos", "--print-ids", "-t", "2",
                        "--log-level", "info"], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip(), r.stderr


def test_isa_cap_is_logged_and_respected():
    _, log_scalar = generate("scalar", PROMPTS[0])
    assert "scalar, int8 quantized matmuls" in log_scalar, log_scalar
    _, log_avx2 = generate("avx2", PROMPTS[0])
    # Every x86-64-v3 machine (the build baseline) runs the AVX2 kernels.
    assert "avx2, int8 quantized matmuls" in log_avx2, log_avx2


def test_every_isa_generates_the_same_tokens():
    for prompt in PROMPTS:
        native, _ = generate(None, prompt)
        assert len(native.split()) >= 48, native
        # avxvnni falls back to avx2 where the CPU lacks AVX-VNNI.
        for isa in ("avxvnni", "avx2", "scalar"):
            ids, _ = generate(isa, prompt)
            assert ids == native, (isa, prompt)
