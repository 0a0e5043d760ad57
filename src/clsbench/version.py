"""The version of clsbench (its own module, so the lowest layers can name it without importing the package)."""

__version__ = "0.1.0"
