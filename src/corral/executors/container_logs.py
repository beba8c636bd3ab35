"""A container's stdout and stderr, appended to the job's durable log (the same file a process job writes).

The engine keeps the container's output (json-file driver); a follower thread streams it with timestamps and writes
each line without its timestamp. Its position, kept in the job's state dir after each line, is a whole second
`since` and how many lines of the engine's stream from that second were written. An agent that was killed and
restarted asks for the stream from that second again and skips that many lines, so the log holds every line once
(a kill between a line and its recorded position repeats that one line).

The position counts lines rather than comparing timestamps because stamps are not in the order of the stream:
Docker stamps a line when its copier (one for stdout, one for stderr) reads it, and the copiers then write in turn,
so a stderr line may follow a stdout line stamped a little later. Any filter by "newer than the last stamp written"
drops such a line. The engine's stream from a given second is always the same lines in the same order, so a count
is exact. `since` moves forward to one second before the newest line's second (stamps are out of order by far
less than a second), so a resume re-reads only the last second or two. Docker stamps lines to the nanosecond,
Podman's compatible API to the second; both work the same way.
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
from dataclasses import dataclass, field
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


@dataclass
class LogPosition:
    """How far a container's output has been copied: `read` lines of the engine's stream from the whole second
    `since` (0: from the start), with how many of those lines bore each second (to move `since` forward).
    `legacy` is the position an older agent wrote, (newest stamp, lines bearing it), skipped by stamp once."""

    since: int = 0
    read: int = 0
    seconds: dict[int, int] = field(default_factory=dict)
    legacy: tuple[tuple[str, int], int] | None = None


def load_position(state_dir: Path) -> LogPosition:
    """The position saved in `state_dir`; the start when there is none (or it is unreadable)."""
    try:
        data = json.loads((state_dir / LOG_POSITION_FILE).read_text(encoding="utf-8"))
        if "since" in data:
            seconds = {int(k): int(v) for k, v in dict(data.get("seconds", {})).items()}
            return LogPosition(int(data["since"]), int(data.get("read", 0)), seconds)
        last = str(data.get("last", ""))
        if not last:
            return LogPosition()
        key = compute_timestamp_key(last)
        return LogPosition(_second_of(key), 0, {}, (key, int(data.get("count", 1))))
    except (OSError, ValueError, TypeError, AttributeError):
        return LogPosition()


def _second_of(key: tuple[str, int]) -> int:
    return calendar.timegm(time.strptime(key[0], "%Y-%m-%dT%H:%M:%S"))


class LogFollower:
    """Copies one container's output to `log_path` on a daemon thread until the container stops."""

    def __init__(self, container: Container, log_path: Path, state_dir: Path, max_bytes: int = 0) -> None:
        self._container = container
        self._max = max_bytes
        self._size = 0  # bytes in the log file
        self._over = 0  # bytes of output dropped past the limit (by this follower)
        self._log_path = log_path
        self._state_dir = state_dir
        self._pos = load_position(state_dir)
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
        """The container's output lines not yet written (stdout and stderr interleaved as the engine stored them)."""
        pos = self._pos
        skip = pos.read  # lines of this stream already written
        stream = self._container.logs(
            stdout=True, stderr=True, stream=True, follow=follow, timestamps=True, since=pos.since or None
        )
        for index, chunk in enumerate(stream):  # one frame: one message of the container, "<timestamp> <text>"
            if index < skip:
                continue
            stamp, _, text = chunk.partition(b" ")
            second = None
            if _STAMP.match(stamp):
                key = compute_timestamp_key(stamp.decode("ascii"))
                second = _second_of(key)
                if pos.legacy is not None:  # an older agent's position: skip up to its newest stamp, once
                    last_key, count = pos.legacy
                    if key < last_key or (key == last_key and count > 0):
                        pos.legacy = (last_key, count - 1) if key == last_key else pos.legacy
                        pos.read += 1
                        pos.seconds[second] = pos.seconds.get(second, 0) + 1
                        continue
                    pos.legacy = None
            else:
                text = chunk  # an engine that does not stamp its lines: the count alone places them
            yield text
            if second is None:
                pos.read += 1
            elif second >= pos.since:  # a line stamped before `since` (a clock stepped back) is not in its stream
                pos.read += 1
                pos.seconds[second] = pos.seconds.get(second, 0) + 1
                if second - 1 > pos.since:  # move forward: the next stream starts a second before this line's
                    pos.since = second - 1
                    pos.seconds = {s: n for s, n in pos.seconds.items() if s >= pos.since}
                    pos.read = sum(pos.seconds.values())
                    # this stream goes on in its own numbering: only its start was skipped
            self._save()

    def _save(self) -> None:
        """After each line: a kill -9 between the line and its position repeats at most that line. No fsync: the
        position must survive the agent's death, not the machine's."""
        pos = self._pos
        tmp = self._state_dir / (LOG_POSITION_FILE + ".tmp")
        try:
            data = {"since": pos.since, "read": pos.read, "seconds": {str(k): v for k, v in pos.seconds.items()}}
            tmp.write_text(json.dumps(data), encoding="utf-8")
            os.replace(tmp, self._state_dir / LOG_POSITION_FILE)
        except OSError:
            pass  # the job's state dir is gone: the job was acknowledged meanwhile


def prepare_agent_log(path: Path) -> None:
    """The job's log file (0600, the agent's: the agent writes it, the container never sees it)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    os.close(fd)
