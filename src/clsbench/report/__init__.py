"""Exporters: each reads stored results only, never runs anything."""
