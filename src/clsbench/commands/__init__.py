"""CLI commands that live in their own modules; each exposes ``register(group)`` and is wired in cli.py."""
