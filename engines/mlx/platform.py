"""Ask mlx.core what this process runs on; the path it implies is `engines.platform`'s.

Only the probing lives here: it imports mlx, which a backend that does not run on MLX, and
the choices in `engines/platform.py`, never need.
"""

from __future__ import annotations

import os
import sys

from engines.platform import PlatformPath, choose_path, openblas_env


def reexec_with_openblas() -> None:
    """On Linux, restart this very process with OpenBLAS preloaded, once, if it is installed.

    Must run before mlx is imported: a library can only be preloaded at process start.
    """
    env = openblas_env()
    if env is None:
        return
    import mlx.core as mx  # the process is replaced: loading mlx here changes nothing after

    if mx.default_device() == mx.gpu:  # CUDA: matrix products never reach a BLAS
        return
    # orig_argv keeps "-m gateway" intact where sys.argv would not.
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def detect() -> PlatformPath:
    """What this process runs on; call after `reexec_with_openblas`."""
    import mlx.core as mx

    info = device_info()
    name = str(info.get("device_name", ""))
    if mx.default_device() != mx.gpu:
        return choose_path("cpu", name)
    if mx.metal.is_available():
        return choose_path("metal", name, int(info.get("max_recommended_working_set_size", 0)))
    return choose_path("cuda", name, int(info.get("total_memory") or info.get("memory_size", 0)))


def device_info() -> dict:
    """MLX's description of the default device (name, memory); empty where it has none."""
    import mlx.core as mx

    try:
        return dict(mx.device_info())
    except (AttributeError, RuntimeError):
        return {}
