"""The event log: structlog set-up, its writer thread, and library logs with repeats held back."""
