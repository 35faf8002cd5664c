"""The Ollama protocol: chat, generate, embed, model routes, options, pull."""
