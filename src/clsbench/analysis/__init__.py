"""Pure derivations from stored results: statistics, summaries, efficiency, comparisons, warnings (no torch)."""
