"""A container's stdout and stderr, appended to the job's durable log (the same file a process job writes).

The engine keeps the container's output (json-file driver); a follower thread streams it with timestamps, writes
each line without its timestamp, and keeps the newest timestamp written, with how many lines bore it, in the job's
state dir. An agent that was killed and restarted resumes from there, so the log holds every line once (a kill
between a line and its recorded position repeats that one line). Docker stamps lines to the nanosecond, Podman's
compatible API to the second: many lines may share one stamp, hence the count.
The log is capped at the run's `max_bytes` (0: no limit) as a process job's shim caps it: past it, lines are read
and dropped, the log says so once, and how much was dropped when the container has ended.
"""

from __future__ import annotations

import calendar
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from docker.errors import DockerException
from docker.models.containers import Container
from requests.exceptions import RequestException

from corral.executors.shim import limit_notice, over_limit_notice

log = logging.getLogger("corral.agent")
LOG_POSITION_FILE = "log-position.json"
_STAMP = re.compile(rb"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}(\.[0-9]{1,9})?Z$")


def compute_timestamp_key(stamp: str) -> tuple[str, int]:
    """An RFC 3339 timestamp with nanoseconds (the engine trims trailing zeros) as a sortable key."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return whole, int((fraction or "0").ljust(9, "0")[:9])


def load_position(state_dir: Path) -> tuple[str, int]:
    """The newest timestamp written ("" for none) and how many lines bearing it were written."""
    try:
        data = json.loads((state_dir / LOG_POSITION_FILE).read_text(encoding="utf-8"))
        return str(data.get("last", "")), int(data.get("count", 1))
    except (OSError, ValueError, TypeError, AttributeError):
        return "", 0


class LogFollower:
    """Copies one container's output to `log_path` on a daemon thread until the container stops."""

    def __init__(self, container: Container, log_path: Path, state_dir: Path, max_bytes: int = 0) -> None:
        self._container = container
        self._max = max_bytes
        self._size = 0  # bytes in the log file
        self._over = 0  # bytes of output dropped past the limit (by this follower)
        self._log_path = log_path
        self._state_dir = state_dir
        self._last, self._count = load_position(state_dir)
        self._thread = threading.Thread(target=self._run, name=f"corral-logs-{state_dir.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> bool:
        """Wait for the copy to reach the container's end; whether it did."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        """Stream until the container has stopped and its output has been read to the end. A stream that breaks
        (the client's read timeout on a quiet job, an engine restart) resumes from the last line written."""
        try:
            with open(self._log_path, "ab", buffering=0) as out:
                self._size = os.fstat(out.fileno()).st_size
                while True:
                    began = time.monotonic()
                    try:
                        for line in self._lines():
                            self._write(out, line)
                        complete = True
                    except RequestException:
                        complete = False
                    self._container.reload()
                    if complete and self._container.status not in ("running", "restarting", "paused", "stopping"):
                        # A followed stream can end before the engine has stored a quick container's last lines
                        # (stdout and stderr are copied apart): one more plain read, deduplicated, takes them.
                        for line in self._lines(follow=False):
                            self._write(out, line)
                        if self._over:
                            out.write(over_limit_notice(self._over))
                        return
                    if time.monotonic() - began < 0.5:
                        time.sleep(0.5)  # no busy loop against an engine that ends streams at once
        except (DockerException, RequestException, OSError) as e:
            log.warning("logs of container %s: %s", self._container.name, e)

    def _write(self, out: BinaryIO, line: bytes) -> None:
        """Append one line, or what of it fits the limit; the first bytes dropped are told once (a log already
        past its limit, from before an agent restart, has told it)."""
        if self._max <= 0:
            out.write(line)
            return
        keep = line[: max(self._max - self._size, 0)]
        if keep:
            out.write(keep)
            self._size += len(keep)
        if len(keep) < len(line):
            if self._size <= self._max:  # the limit is reached now: say so once (the notice takes it past)
                notice = limit_notice(self._max)
                out.write(notice)
                self._size += len(notice)
            self._over += len(line) - len(keep)

    def _lines(self, follow: bool = True) -> Iterator[bytes]:
        """The container's output lines not yet written (stdout and stderr interleaved as they came)."""
        last_key = compute_timestamp_key(self._last) if self._last else None
        since = calendar.timegm(time.strptime(last_key[0], "%Y-%m-%dT%H:%M:%S")) if last_key else None
        seen = 0  # lines of this stream stamped last_key
        stream = self._container.logs(
            stdout=True, stderr=True, stream=True, follow=follow, timestamps=True, since=since
        )
        for chunk in stream:  # one frame: one message of the container, "<timestamp> <text>"
            stamp, _, text = chunk.partition(b" ")
            if not _STAMP.match(stamp):
                yield chunk  # an engine that does not stamp its lines
                continue
            key = compute_timestamp_key(stamp.decode("ascii"))
            if last_key is not None and key < last_key:
                continue  # written before the agent restarted (or before this stream broke)
            if key == last_key:
                seen += 1
                if seen <= self._count:
                    continue  # this stamp's lines already written
                self._count = seen
            else:
                last_key, seen, self._count = key, 1, 1
                self._last = stamp.decode("ascii")
            yield text
            self._save()

    def _save(self) -> None:
        """After each line: a kill -9 between the line and its position repeats at most that line. No fsync: the
        position must survive the agent's death, not the machine's."""
        if not self._last:
            return
        tmp = self._state_dir / (LOG_POSITION_FILE + ".tmp")
        try:
            tmp.write_text(json.dumps({"last": self._last, "count": self._count}), encoding="utf-8")
            os.replace(tmp, self._state_dir / LOG_POSITION_FILE)
        except OSError:
            pass  # the job's state dir is gone: the job was acknowledged meanwhile


def prepare_agent_log(path: Path) -> None:
    """The job's log file (0600, the agent's: the agent writes it, the container never sees it)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    os.close(fd)
