"""The machine: environment capture, NVML, pre-flight checks, the GPU probe, telemetry, containers."""
