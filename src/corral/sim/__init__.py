"""Simulators that drive the same scheduler code over trace files."""
