"""Engine process: the gateway runs a model server program per model (its own process
group, watched by `keeper.py` so it never outlives the gateway) and serves it as an upstream.
Imports `engines.upstream`, the shared runtime and `schemas`; nothing of `gateway/`.
"""
