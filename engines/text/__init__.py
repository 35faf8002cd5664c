"""Text in and out of any backend: chat-template messages and tools, reasoning markers, stop
strings, tool-call parsing, output controls as grammars (`constrain`: the plan; `grammars`:
compiled and checked; `constraint_state`: one sequence through it; on llguidance). Pure
Python; may import `schemas`, `engines.errors`, llguidance and mlx-lm's tool parsers."""
