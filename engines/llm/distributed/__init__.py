"""An MLX model sharded over several processes with MLX's own collectives (`distributed:`)."""
