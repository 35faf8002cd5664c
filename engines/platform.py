"""The path a local backend runs on (device, BLAS, how weights are held), and why.

`PlatformPath` is what every backend is handed and what `server_started` reports; the
choices below need no MLX. Probing the device is the backend's own business
(`engines/mlx/platform.py` asks mlx.core, then calls `choose_path`).

Measured on Linux CPU (DESIGN.md): the `mlx[cpu]` wheel links the reference BLAS (~5
GFLOP/s); the same process started with Debian's OpenBLAS preloaded runs ~40x faster matrix
products. MLX's CPU kernels for 4-bit matrices are slower than float32 products, so on the
CPU quantized weights are expanded to float32 at load. On CUDA they are expanded to
bfloat16 (where the memory left allows it: `MLXEngine._weights_held`), for batching; on
Apple Silicon (Metal) they run as stored. On a GPU nothing is preloaded: BLAS is not on
that path.
The path names the device and the memory models live in (GPU memory on CUDA, Metal's
recommended working set on Apple Silicon, RAM on the CPU), which `memory_budget: auto`
takes its share of.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import msgspec

from engines.units import describe

OPENBLAS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)
# Measured on an H200 (bench/RESULTS.md, 2026-11-30): MLX's CUDA kernel for 4-bit matrices
# costs about as much per sequence in a batch as for one alone (1B: 1.6k tok/s at 64 streams),
# while bfloat16 products batch (8.0k); alone, the two decode at the same speed.
CUDA_WHY = (
    "quantized weights expanded to bfloat16 where that costs no context: MLX's 4-bit CUDA "
    "kernels do not batch (5-12x slower at 64 sequences)"
)
# Set by the gateway when it re-executes itself, so it never loops; set by a user to opt out.
NO_REEXEC_ENV = "GATEWAY_NO_OPENBLAS"


class PlatformPath(msgspec.Struct, frozen=True, kw_only=True):
    device: str
    blas: str
    weights: str
    why: str
    device_name: str = ""
    memory: str = ""  # where the weights and KV caches live, and how much of it
    memory_bytes: int = 0  # that memory in bytes: what `memory_budget: auto` takes a share of

    @property
    def cuda(self) -> bool:
        return self.device == "gpu (cuda)"

    def as_dict(self) -> dict[str, str]:
        """What `server_started` reports (the memory in words; bytes are for the budget)."""
        shown = msgspec.structs.asdict(self)
        del shown["memory_bytes"]
        return shown


def find_openblas() -> str | None:
    return next((p for p in OPENBLAS_CANDIDATES if Path(p).exists()), None)


def openblas_loaded() -> bool:
    try:
        return "libopenblas" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def openblas_env() -> dict[str, str] | None:
    """The environment to restart this process in with OpenBLAS preloaded, or None where
    that does not apply: not Linux, opted out (or restarted already), not installed, or
    preloaded already. A GPU process needs none either; only the backend can tell."""
    if not sys.platform.startswith("linux") or os.environ.get(NO_REEXEC_ENV):
        return None
    library = find_openblas()
    if library is None or library in os.environ.get("LD_PRELOAD", ""):
        return None
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(filter(None, [library, env.get("LD_PRELOAD")]))
    env[NO_REEXEC_ENV] = "1"
    return env


def choose_path(backend: str, device_name: str = "", memory_bytes: int = 0) -> PlatformPath:
    """The path on `backend` ("metal", "cuda" or "cpu"): how weights are held there, and on
    the CPU which BLAS this process has loaded. `memory_bytes` is the device's memory as the
    backend probed it (the machine's RAM when 0)."""
    memory_bytes = memory_bytes or ram_bytes()

    if backend in ("metal", "cuda"):
        kind = "recommended working set" if backend == "metal" else "GPU memory"
        if backend == "metal":
            weights, why = "as stored", "Metal's kernels run quantized weights fast"
        else:
            weights, why = "bfloat16", CUDA_WHY
        return PlatformPath(
            device=f"gpu ({backend})",
            blas="n/a",
            weights=weights,
            why=why,
            device_name=device_name,
            memory=f"{describe(memory_bytes)} {kind}",
            memory_bytes=memory_bytes,
        )
    if openblas_loaded():
        blas, why = "openblas", "OpenBLAS preloaded: ~40x the wheel's reference BLAS"
    elif sys.platform.startswith("linux"):
        blas = "reference"
        why = "OpenBLAS not found (apt-get install libopenblas0-pthread for ~40x faster BLAS)"
    else:
        blas, why = "accelerate", "the platform BLAS"
    return PlatformPath(
        device="cpu",
        blas=blas,
        weights="float32",
        why=why + "; quantized weights expanded to float32 (MLX's 4-bit CPU kernels are slower)",
        device_name=device_name,
        memory=f"{describe(memory_bytes)} RAM",
        memory_bytes=memory_bytes,
    )


def ram_bytes() -> int:
    """The machine's RAM."""
    if sys.platform == "darwin":
        import subprocess

        return int(subprocess.check_output(["sysctl", "-n", "hw.memsize"]).strip())
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
