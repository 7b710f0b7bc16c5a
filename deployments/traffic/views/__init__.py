"""The traffic pages: API keys and usage."""
