"""Engines (scripted, MLX), model sources and the per-model runner with its FIFO queue."""
