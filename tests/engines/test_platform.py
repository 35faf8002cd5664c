"""The platform path's choices, which need no MLX (`engines/platform.py`)."""

from __future__ import annotations

import sys

from engines import platform
from engines.platform import CUDA_WHY, NO_REEXEC_ENV, choose_path, openblas_env


def test_each_backend_holds_weights_its_own_way():
    cuda = choose_path("cuda", "NVIDIA H200")
    assert (cuda.device, cuda.blas, cuda.weights, cuda.why) == (
        "gpu (cuda)",
        "n/a",
        "bfloat16",
        CUDA_WHY,
    )
    assert cuda.device_name == "NVIDIA H200" and cuda.memory.endswith(" GPU memory")
    metal = choose_path("metal")
    assert (metal.device, metal.weights) == ("gpu (metal)", "as stored")
    assert metal.memory.endswith(" recommended working set")
    cpu = choose_path("cpu")
    assert (cpu.device, cpu.weights) == ("cpu", "float32") and cpu.memory.endswith(" RAM")
    assert cpu.why.endswith(
        "quantized weights expanded to float32 (MLX's 4-bit CPU kernels are slower)"
    )


def test_the_cpu_path_names_the_blas_this_process_loaded(monkeypatch):
    monkeypatch.setattr(platform, "openblas_loaded", lambda: True)
    assert choose_path("cpu").blas == "openblas"
    monkeypatch.setattr(platform, "openblas_loaded", lambda: False)
    expected = "reference" if sys.platform.startswith("linux") else "accelerate"
    assert choose_path("cpu").blas == expected


def test_a_restarted_or_opted_out_process_is_not_restarted_again(monkeypatch):
    monkeypatch.setattr(platform, "find_openblas", lambda: "/usr/lib/libopenblas.so.0")
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv(NO_REEXEC_ENV, raising=False)
    env = openblas_env()
    assert env["LD_PRELOAD"] == "/usr/lib/libopenblas.so.0" and env[NO_REEXEC_ENV] == "1"
    monkeypatch.setenv(NO_REEXEC_ENV, "1")
    assert openblas_env() is None
    monkeypatch.delenv(NO_REEXEC_ENV)
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libopenblas.so.0")
    assert openblas_env() is None
    monkeypatch.setattr(platform, "find_openblas", lambda: None)
    monkeypatch.delenv("LD_PRELOAD")
    assert openblas_env() is None
