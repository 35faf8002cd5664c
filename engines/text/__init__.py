"""Text in and out of any backend: chat-template messages and tools, reasoning markers, stop
strings, tool-call parsing. Pure Python; may import `schemas`, `engines.errors` and mlx-lm's
tool parsers."""
