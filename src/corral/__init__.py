"""Corral: a self-hosted GPU cluster manager for deep-learning work."""

__version__ = "0.1.0"
