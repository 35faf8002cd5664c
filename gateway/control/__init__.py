"""The gateway's control plane, no HTTP: config loading, the registry of routes, reload,
keys, pulls."""
