"""msgspec structs only: the config file, the wire formats and the canonical request."""
