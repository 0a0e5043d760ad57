"""How images reach the model: one module per pipeline (cpu, gpu, dali)."""
