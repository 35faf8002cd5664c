"""Every KV cache kind the MLX engines keep, in one place (as mlx-lm keeps its caches in one
module): `prefix` (how far a prompt runs alike a parked cache, the shortest prefix worth
reusing), `disk` (the disk tier's blocks of KV, their keys and worth) and `rates` (the
prefill and load rates measured beside the blocks)."""
