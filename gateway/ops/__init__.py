"""Ops: /health, /metrics, the /ui page and its event feed, admin routes."""
