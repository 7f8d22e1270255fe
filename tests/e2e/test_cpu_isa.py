"""KESTREL_CPU_ISA caps the SIMD kernels a process uses (to run an AVX2-only or scalar machine's
code path here); the model still generates the same greedy tokens on every path it can run."""

import os
import subprocess

from kestrel_e2e import KESTREL_BIN, MODEL_PATH


def generate(isa):
    env = dict(os.environ, KESTREL_CPU_ISA=isa)
    r = subprocess.run([str(KESTREL_BIN), "generate", "-m", str(MODEL_PATH), "-p",
                        "Name the capital city of France.", "-n", "6", "--temperature", "0",
                        "--print-ids", "-t", "2", "--log-level", "info"], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip(), r.stderr


def test_isa_cap_is_logged_and_respected():
    ids_scalar, log_scalar = generate("scalar")
    assert "scalar, int8 quantized matmuls" in log_scalar, log_scalar
    ids_avx2, log_avx2 = generate("avx2")
    # Every x86-64-v3 machine (the build baseline) runs the AVX2 kernels.
    assert "avx2, int8 quantized matmuls" in log_avx2, log_avx2
    assert ids_scalar and ids_scalar == ids_avx2
