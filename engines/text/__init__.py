"""Text in and out of any backend: chat-template messages and tools, reasoning markers, stop
strings, tool-call parsing, output controls as grammars (`constrain`, on llguidance). Pure
Python; may import `schemas`, `engines.errors`, llguidance and mlx-lm's tool parsers."""
