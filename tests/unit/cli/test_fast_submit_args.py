"""`corral submit` reads the usual command lines without argparse (corral.cli.light.fast_submit_args): whatever it
reads must be what argparse reads, and anything it does not read whole goes to argparse (help, errors and their
words stay argparse's). Checked on generated command lines, argparse being the reference."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.cli import light

FLAGS = [flag for flags, *_ in light.SUBMIT_OPTIONS for flag in flags]
KINDS = {flag: kind for flags, kind, *_ in light.SUBMIT_OPTIONS for flag in flags}
# what users type, and what trips parsers up: numbers of every shape, '=', a leading '-', spaces, nothing at all
VALUES = st.one_of(
    st.sampled_from(["1", "0", "-1", "+2", " 3", "1_000", "x", "", "-", "--", "A=B", "=", "a b", "-e", "--gpus", "8"]),
    st.text(alphabet="ab-=_ 1%", max_size=5),
)
# abbreviations, help, look-alikes and plain words: all must go to argparse or start the command
NOISE = st.sampled_from(["--gpu", "--nam", "-h", "--help", "-eA=B", "-x", "--bogus", "python", "train.py", "", "-5"])


@st.composite
def command_lines(draw: Any) -> list[str]:
    argv: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        choice = draw(st.integers(0, 9))
        if choice < 6:
            flag = draw(st.sampled_from(FLAGS))
            if KINDS[flag] == "flag":
                argv.append(flag)
            elif choice == 0 and flag.startswith("--"):
                argv.append(f"{flag}={draw(VALUES)}")
            else:
                argv += [flag, draw(VALUES)]
        elif choice < 8:
            argv.append(draw(NOISE))
        else:
            argv.append(draw(st.sampled_from([flag for flag in FLAGS if KINDS[flag] != "flag"])))  # value missing?
    if draw(st.booleans()):
        argv += draw(st.sampled_from([["--", "python", "t.py"], ["python", "-c", "1"], ["--"], ["--", "--gpus", "2"]]))
    return argv


def _argparse(argv: list[str]) -> dict[str, Any] | None:
    """What argparse reads, or None when it refuses (or prints help)."""
    try:
        return vars(light._submit_parser().parse_args(argv))
    except (light.UsageError, SystemExit):
        return None


def _command(values: dict[str, Any]) -> list[str]:
    command = values["command"]
    return command[1:] if command[:1] == ["--"] else command  # what submit() runs, as it reads either


@settings(max_examples=1500, deadline=None)
@given(command_lines())
def test_what_the_fast_reading_reads_argparse_reads_the_same(argv: list[str]) -> None:
    fast = light.fast_submit_args(argv)
    if fast is None:
        return  # argparse reads it (and words any error)
    reference = _argparse(argv)
    assert reference is not None, f"argparse refuses {argv}, the fast reading took it"
    got = dict(vars(fast))
    assert _command(got) == _command(reference)
    del got["command"], reference["command"]
    assert got == reference


@pytest.mark.parametrize(
    "argv",
    [
        ["--gpus", "1", "--", "python", "train.py"],
        ["--name", "sweep-3", "-e", "LR=0.1", "--env", "A=B", "--time-limit", "3600", "--", "t.py", "--lr", "1"],
        ["--gpus", "2", "python", "train.py"],
        ["--array", "0-999%50", "--gpus=1", "--queue=high", "--json", "--", "sh", "-c", "echo $CORRAL_ARRAY_INDEX"],
        ["--image", "pytorch:2", "--mount", "/data:/data:ro", "--web-ui", "--spot", "--", "x"],
    ],
)
def test_the_usual_command_lines_are_read_without_argparse(argv: list[str]) -> None:
    fast = light.fast_submit_args(argv)
    assert fast is not None
    reference = _argparse(argv)
    assert reference is not None and _command(vars(fast)) == _command(reference)


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--gpu", "1", "--", "x"],  # an abbreviation: argparse's to resolve or refuse
        ["--gpus", "two", "--", "x"],
        ["--priority", "-5", "--", "x"],  # a negative number: argparse's rules
        ["--name"],
        ["-eA=B", "--", "x"],
        ["--json=yes", "--", "x"],
        ["python", "train.py", "--gpu", "1"],  # argparse still reads --gpu here (and refuses it)
    ],
)
def test_what_it_does_not_read_whole_goes_to_argparse(argv: list[str]) -> None:
    assert light.fast_submit_args(argv) is None


JOBS_WORDS = ["--all", "-a", "--array", "-r", "--wide", "-w", "--json", "-aw", "-ra", "--al", "--js", "-h", "--help"]
JOBS_WORDS += ["x", "--wide=1", "--", "-", "--all=", "-A", "--ALL"]


@given(st.lists(st.sampled_from(JOBS_WORDS), max_size=6))
def test_corral_jobs_flags_read_without_argparse_are_what_argparse_reads(argv: list[str]) -> None:
    fast = light.fast_flag_args(argv, light.JOBS_FLAGS)
    if fast is None:  # argparse's own reading (or its error): nothing to compare
        return
    assert vars(fast) == vars(light._jobs_parser().parse_args(argv)), argv


def test_corral_jobs_leaves_the_unusual_to_argparse() -> None:
    for argv in (["-aw"], ["--al"], ["-h"], ["--all", "x"], ["--json=1"]):
        assert light.fast_flag_args(argv, light.JOBS_FLAGS) is None, argv
    assert vars(light.fast_flag_args([], light.JOBS_FLAGS) or {}) == {
        "all": False,
        "array": False,
        "wide": False,
        "json": False,
    }


ID_WORDS = ["7", "007", "0", "2147483647", "2147483648", "-1", "\u0663", "x", "--", "-h", "-fj", "--js"]
ID_WORDS += ["--json", "--follow", "-f", "--rank", "3", "--rank=2", "--timeout", "1.5", "--timeout=0"]
ID_COMMANDS = [
    (light._show_parser, {"--json": "json"}, None),
    (light._cancel_parser, {"--json": "json"}, None),
    (light._logs_parser, {"--follow": "follow", "-f": "follow"}, {"rank": 0}),
    (light._wait_parser, {}, {"timeout": None}),
]


@given(st.sampled_from(ID_COMMANDS), st.lists(st.sampled_from(ID_WORDS), max_size=4))
def test_show_logs_cancel_and_wait_read_without_argparse_what_argparse_reads(command: Any, argv: list[str]) -> None:
    parser, flags, defaults = command
    fast = light.fast_id_args(argv, flags, defaults)
    if fast is None:
        return
    assert vars(fast) == vars(parser().parse_args(argv)), argv


def test_a_job_id_command_line_of_another_shape_goes_to_argparse() -> None:
    for argv in (["7", "8"], [], ["0"], ["2147483648"], ["-1"], ["\u0663"], ["7", "--"], ["--json=1", "7"]):
        assert light.fast_id_args(argv, {"--json": "json"}) is None, argv
    assert vars(light.fast_id_args(["--json", "007"], {"--json": "json"}) or {}) == {"json": True, "job_id": 7}
