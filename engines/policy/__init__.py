"""A model's declared policies around its runner: tool-call guardrails and repair, context
truncation, and `answer()`, the one path every chat protocol takes. Imports no backend."""
