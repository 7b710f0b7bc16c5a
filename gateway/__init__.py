"""The inference data plane: per-endpoint OpenAI-compatible URLs, as its own ASGI process."""
