"""Where images come from: one module per source (synthetic, folder, memory)."""
