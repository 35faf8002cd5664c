"""The Anthropic Messages protocol: messages, their stream, token counting, `claude-` names."""
