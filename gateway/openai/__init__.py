"""The OpenAI protocol: chat completions, completions, Responses (and their store), embeddings."""
