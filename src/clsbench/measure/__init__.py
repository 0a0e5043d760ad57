"""Clocks, device timers and memory readings used inside the timed regions."""
