"""Rendering helpers: Rich tables for people, JSON for tools."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from corral.cli.light import short_time

console = Console()


def print_json(data: BaseModel | Sequence[BaseModel] | Any) -> None:
    if isinstance(data, BaseModel):
        payload: Any = data.model_dump(mode="json")
    elif isinstance(data, list | tuple) and all(isinstance(d, BaseModel) for d in data):
        payload = [d.model_dump(mode="json") for d in data]
    else:
        payload = data
    print(json.dumps(payload, indent=2))


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title, header_style="bold")
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*["" if v is None else str(v) for v in r])
    console.print(table)


def print_fields(fields: Sequence[tuple[str, Any]], width: int) -> None:
    """One `name  value` line per field, names right-aligned to `width` (None prints as nothing)."""
    for k, v in fields:
        console.print(f"[bold]{k:>{width}}[/bold]  {'' if v is None else v}", highlight=False)


__all__ = ["console", "print_fields", "print_json", "print_table", "short_time"]
