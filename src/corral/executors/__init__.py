"""Executors: how the agent runs jobs (the Executor protocol and its implementations)."""

from __future__ import annotations

from corral.executors.base import Executor, ExitRecord, LaunchSpec, PublishedPort
from corral.executors.process import ProcessExecutor

__all__ = ["ExitRecord", "Executor", "LaunchSpec", "ProcessExecutor", "PublishedPort"]
