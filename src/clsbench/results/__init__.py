"""Result files: schema, atomic I/O, environment capture."""
