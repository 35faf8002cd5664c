"""Model sources: a `source:` string (directory, `.gguf`, `package:`) resolved to a directory
mlx-lm opens, with the GGUF header check and conversion. May import mlx and `engines.errors`."""
