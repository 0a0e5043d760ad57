"""Procedures built on the engine: sweep, tune, diagnose, scale. Each registers what ``show`` prints for it."""
