"""Routed experts kept partly on disk (`experts:`): the safetensors records of each layer's
stacked experts (files), the per-layer cache of resident ones and its policy (cache), the
SwitchGLU/SwitchMLP stand-in that reads the missing ones each step (switch), their
installation in a lazily loaded model (install), `resident: auto` (sizing), and a seeded
test-built qwen3_moe (demo)."""
