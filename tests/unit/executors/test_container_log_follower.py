"""The container log follower against an engine whose stream is scripted: lines whose stamps are out of the
stream's order (Docker's stdout and stderr copiers stamp, then write in turn), resumes after a kill, and the
position an older agent wrote."""

from __future__ import annotations

import calendar
import json
import time
from collections.abc import Iterator
from pathlib import Path

from corral.executors.container_logs import LOG_POSITION_FILE, LogFollower


def _stamp(second: int, nanos: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)) + f".{nanos:09d}Z"


BASE = calendar.timegm((2026, 11, 28, 7, 0, 0, 0, 0, 0))


class ScriptedContainer:
    """The engine's side: the stored lines in the order they were written, filtered by `since` as Docker does
    (stamps at or after that second), ended at once (the container has exited)."""

    name = "scripted"
    status = "exited"

    def __init__(self, lines: list[tuple[str, bytes]]) -> None:
        self.lines = lines
        self.calls: list[int | None] = []

    def reload(self) -> None:
        pass

    def logs(self, *, since: int | None = None, **_: object) -> Iterator[bytes]:
        self.calls.append(since)
        for stamp, text in self.lines:
            second = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
            if since is None or second >= since:
                yield stamp.encode() + b" " + text


def _follow(container: ScriptedContainer, tmp_path: Path) -> str:
    log = tmp_path / "job.log"
    follower = LogFollower(container, log, tmp_path)  # type: ignore[arg-type]
    follower.start()
    assert follower.join(10)
    return log.read_text()


def test_a_stderr_line_stamped_before_the_stdout_line_ahead_of_it_is_kept(tmp_path: Path) -> None:
    lines = [
        (_stamp(BASE, 100), b"first\n"),
        (_stamp(BASE, 300), b"second\n"),
        (_stamp(BASE, 200), b"oops\n"),  # stderr: read (stamped) before "second", written after it
    ]
    assert _follow(ScriptedContainer(lines), tmp_path) == "first\nsecond\noops\n"


def test_a_restarted_follower_writes_each_line_once(tmp_path: Path) -> None:
    lines = [(_stamp(BASE + i // 3, (i * 7919) % 1000), f"line {i}\n".encode()) for i in range(12)]
    lines[5], lines[6] = lines[6], lines[5]  # out of stamp order across a second's edge too
    container = ScriptedContainer(lines[:7])
    first = _follow(container, tmp_path)
    assert first == "".join(t.decode() for _, t in lines[:7])
    position = json.loads((tmp_path / LOG_POSITION_FILE).read_text())
    assert position["since"] > BASE  # moved forward: a resume does not read the whole log again

    container.lines = lines  # the job went on while no agent ran
    calls_before = len(container.calls)
    assert _follow(container, tmp_path) == "".join(t.decode() for _, t in lines)
    assert container.calls[calls_before] == position["since"]  # resumed from the saved second


def test_the_position_of_an_older_agent_is_resumed_without_repeats(tmp_path: Path) -> None:
    lines = [(_stamp(BASE, n), f"line {n}\n".encode()) for n in (1, 2, 3, 4)]
    (tmp_path / "job.log").write_text("line 1\nline 2\n")
    (tmp_path / LOG_POSITION_FILE).write_text(json.dumps({"last": _stamp(BASE, 2), "count": 1}))
    assert _follow(ScriptedContainer(lines), tmp_path) == "line 1\nline 2\nline 3\nline 4\n"


def test_an_engine_that_stamps_to_the_second_keeps_lines_sharing_a_stamp(tmp_path: Path) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(BASE))
    lines = [(stamp, b"same\n"), (stamp, b"same\n"), (stamp, b"other\n")]
    container = ScriptedContainer(lines[:2])
    assert _follow(container, tmp_path) == "same\nsame\n"
    container.lines = lines
    assert _follow(container, tmp_path) == "same\nsame\nother\n"


def test_a_line_stamped_before_the_saved_second_does_not_cost_a_later_line(tmp_path: Path) -> None:
    lines = [
        (_stamp(BASE + 5, 1), b"a\n"),
        (_stamp(BASE + 5, 2), b"b\n"),
        (_stamp(BASE + 2, 3), b"c\n"),  # the host's clock stepped back: not in the stream from BASE + 4
    ]
    container = ScriptedContainer(lines)
    assert _follow(container, tmp_path) == "a\nb\nc\n"
    container.lines = [*lines, (_stamp(BASE + 6, 4), b"d\n")]
    assert _follow(container, tmp_path) == "a\nb\nc\nd\n"


def test_a_position_file_without_its_count_starts_that_second_again(tmp_path: Path) -> None:
    (tmp_path / LOG_POSITION_FILE).write_text(json.dumps({"since": BASE}))
    assert _follow(ScriptedContainer([(_stamp(BASE, 1), b"x\n")]), tmp_path) == "x\n"
