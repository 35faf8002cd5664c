"""The HTTP gateway: config, registry, protocol routes, events and the CLI."""
