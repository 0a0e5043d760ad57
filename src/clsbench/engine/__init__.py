"""The engine: one repeat loop over fresh worker processes, the worker itself, and incremental result files."""
