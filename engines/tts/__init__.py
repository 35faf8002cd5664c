"""Text to speech on MLX (`task: speech`): mlx-audio's Kokoro, its text read by espeak-ng."""
