"""Persistence: the StateStore protocol and its SQL implementation (SQLite and PostgreSQL)."""

from corral.store.base import StateStore
from corral.store.sql import SqlStore, open_store

__all__ = ["StateStore", "SqlStore", "open_store"]
