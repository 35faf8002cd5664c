"""Speech to text on MLX: the engine (engine), audio decoding (audio), Whisper on mlx-audio
(whisper) and its tokenizer from tokenizer.json alone (tokenizer)."""
