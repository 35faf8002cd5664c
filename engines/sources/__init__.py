"""Model sources: a `source:` string (directory, `.gguf`, `package:`, `hf:`) resolved to a
directory mlx-lm opens, with the GGUF header check and conversion, and the Hugging Face Hub
download (`hub`, through huggingface_hub). May import mlx, huggingface_hub and `engines.errors`."""
