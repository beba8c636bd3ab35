"""The agent's own record of what ran on its GPUs: one JSON line per start and per exit, in the agent's dir.

The server's database says what it meant to run where; this file says what the node actually did, written by
the agent before it tells the server anything: a start when the executor has launched a run, an exit when the
agent first sees it (before the report that frees its GPUs leaves the node). An operator (or the chaos tests)
reads it to check that no GPU ever ran two runs at once, even across a lost server, a lost network or a restart.

    {"at": 1764153600.123, "event": "start", "job": 42, "attempt": 1, "rank": 0, "gpus": [0, 1]}
    {"at": 1764153610.456, "event": "exit", "job": 42, "attempt": 1, "rank": 0, "exit_code": 0}

Bounded: past `max_bytes` the file moves to `journal.jsonl.1` (the one before it goes). A write that fails (a full
disk) is logged, once per failure spell, and never stops the agent: the record is for checking, not for running.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("corral.agent")

JOURNAL_FILE = "journal.jsonl"
MAX_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class Interval:
    """One run's time on one GPU, as the journal tells it (`end` None: still running when the journal ended)."""

    node: str
    gpu: int
    run: tuple[int, int, int]
    start: float
    end: float | None


class Journal:
    def __init__(self, directory: Path, max_bytes: int = MAX_BYTES) -> None:
        self.path = directory / JOURNAL_FILE
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._failing = False
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def started(self, job: int, attempt: int, rank: int, gpus: tuple[int, ...]) -> None:
        self._write({"event": "start", "job": job, "attempt": attempt, "rank": rank, "gpus": list(gpus)})

    def exited(self, job: int, attempt: int, rank: int, exit_code: int) -> None:
        self._write({"event": "exit", "job": job, "attempt": attempt, "rank": rank, "exit_code": exit_code})

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps({"at": round(time.time(), 6), **record}, separators=(",", ":")) + "\n"
        with self._lock:
            try:
                if self.path.exists() and self.path.stat().st_size > self.max_bytes:
                    os.replace(self.path, self.path.with_name(JOURNAL_FILE + ".1"))
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
                if self._failing:
                    log.warning("the journal %s is written again", self.path)
                self._failing = False
            except OSError as e:
                if not self._failing:
                    log.error("the journal %s could not be written (%s); the agent goes on without it", self.path, e)
                self._failing = True


def read_intervals(node: str, directory: Path) -> list[Interval]:
    """Every run's GPU intervals from one agent's journal (the rotated file first)."""
    starts: dict[tuple[int, int, int], tuple[float, list[int]]] = {}
    ends: dict[tuple[int, int, int], float] = {}
    for path in (directory / (JOURNAL_FILE + ".1"), directory / JOURNAL_FILE):
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a line cut short by a full disk
            run = (int(r["job"]), int(r["attempt"]), int(r["rank"]))
            if r["event"] == "start":
                starts[run] = (float(r["at"]), [int(g) for g in r["gpus"]])
            elif r["event"] == "exit":
                ends.setdefault(run, float(r["at"]))
    return [Interval(node, gpu, run, at, ends.get(run)) for run, (at, gpus) in sorted(starts.items()) for gpu in gpus]


def overlaps(intervals: list[Interval]) -> list[tuple[Interval, Interval]]:
    """Pairs of runs that held one GPU of one node at the same time."""
    found: list[tuple[Interval, Interval]] = []
    by_gpu: dict[tuple[str, int], list[Interval]] = {}
    for i in intervals:
        by_gpu.setdefault((i.node, i.gpu), []).append(i)
    for runs in by_gpu.values():
        runs.sort(key=lambda i: i.start)
        for a, b in zip(runs, runs[1:], strict=False):
            if a.end is None or b.start < a.end:
                found.append((a, b))
    return found
