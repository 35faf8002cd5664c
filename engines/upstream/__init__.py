"""Engine upstream: a model served by OpenAI-protocol servers elsewhere (replicas balanced,
health-checked, failed over before the first output). Imports `schemas`, the shared runtime
(`engines.base`, `batch`, `errors`, `log`) and httpx; nothing MLX, nothing of `gateway/`.
"""
