"""Every KV cache kind the MLX engines keep, in one place (as mlx-lm keeps its caches in one
module): `prefix` (how far a prompt runs alike a parked cache, the shortest prefix worth
reusing), `parked` (finished conversations' caches in RAM, on mlx-lm's
`LRUPromptCache`), `disk` (the disk tier of a model's KV: find, load and save a prompt's blocks),
`blocks` (a block's arrays in MLX and on the host), `salt` (what a block key means),
`worth` (whether the disk beats prefill here) and `rates` (the prefill and load rates
measured beside the blocks)."""
