"""README.md as a test script: its fenced `sh` and `console` blocks, in order, with the `readme-test` markers.

The convention (CONTRIBUTING.md, "The README is a test"):

- Every ```sh block is run, one command per line (a trailing backslash continues a line; blank lines and lines
  that are only a comment are not commands), in README order, by `bash -c`: the trailing `# ...` comment of a
  line is the shell's business. A ```console block is run the same way, its commands the `$ ` lines; the lines
  after a command, up to the next `$ `, are its output as shown, compared loosely (`output_matches`).
- Other fences (```, ```json, ...) are not commands.
- Markers, HTML comments on the lines right before a fence (invisible on the rendered page), each with a reason:
  `<!-- readme-test: skip (why) -->` skips the block; `<!-- readme-test: skip "PREFIX" ["PREFIX" ...] (why) -->`
  skips only the block's commands that start with a PREFIX (each must match one); `<!-- readme-test: background
  "PREFIX" ... (why) -->` starts those commands and goes on while they run (a server, an agent: a program that
  does not end), on a machine of their own. A skip is visible in the README itself, and counted by the test.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

RUNNABLE = ("sh", "console")
FENCE = re.compile(r"^```(?P<lang>\S*)\s*$")
MARKER = re.compile(r"^<!--\s*readme-test:(?P<body>.*?)-->\s*$")
DIRECTIVE = re.compile(
    r'^(?P<kind>skip|background)(?P<prefixes>(?:\s+"[^"]+")*)\s+\((?P<why>[^()]*(?:\([^()]*\)[^()]*)*)\)$'
)


class ReadmeFormatError(ValueError):
    """A marker the test cannot honour: a misspelt directive, no reason, a marker that skips nothing."""


@dataclass
class Command:
    line: int  # 1-based line of README.md where the command starts
    text: str  # as written (continuations joined)
    output: list[str] | None = None  # a console block's shown output, else None
    skipped: str | None = None  # why this command is not run (a `skip "PREFIX"` marker)
    background: str | None = None  # why it runs in the background (a `background "PREFIX"` marker)


@dataclass
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    commands: list[Command] = field(default_factory=list)
    skipped: str | None = None  # why the whole block is not run


def parse_readme(text: str) -> list[Block]:
    """The runnable blocks of a README, in order, with their skips applied; raises ReadmeFormatError."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: list[tuple[int, str, str, list[str]]] = []  # (line, kind, why, prefixes) of markers awaiting a fence
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i]
        marker = MARKER.match(line.strip())
        if marker:
            d = DIRECTIVE.match(marker["body"].strip())
            if d is None or (d["kind"] == "background" and not d["prefixes"]):
                raise ReadmeFormatError(
                    f"README.md:{number}: unknown readme-test marker {marker['body'].strip()!r} (expected: "
                    'skip (why), skip "PREFIX" ... (why) or background "PREFIX" ... (why))'
                )
            pending.append((number, d["kind"], d["why"].strip(), re.findall(r'"([^"]+)"', d["prefixes"])))
            i += 1
            continue
        fence = FENCE.match(line)
        if fence is None:
            if pending:
                raise ReadmeFormatError(
                    f"README.md:{pending[0][0]}: a readme-test marker must come right before a fence"
                )
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        lang = fence["lang"]
        body = [(j + 1, lines[j]) for j in range(i + 1, end)]
        if lang in RUNNABLE:
            block = Block(number, lang, _console_commands(body) if lang == "console" else _sh_commands(body))
            for marker_line, kind, why, prefixes in pending:
                _apply_marker(block, marker_line, kind, why, prefixes)
            blocks.append(block)
        elif pending:
            raise ReadmeFormatError(f"README.md:{pending[0][0]}: a readme-test marker before a ```{lang} block")
        pending = []
        i = end + 1
    return blocks


def _apply_marker(block: Block, marker_line: int, kind: str, why: str, prefixes: list[str]) -> None:
    if not prefixes:
        block.skipped = why
        return
    for prefix in prefixes:
        hits = [c for c in block.commands if c.text.startswith(prefix)]
        if not hits:
            raise ReadmeFormatError(f"README.md:{marker_line}: {kind} {prefix!r} matches no command of its block")
        for c in hits:
            setattr(c, "skipped" if kind == "skip" else "background", why)


def _sh_commands(body: list[tuple[int, str]]) -> list[Command]:
    commands: list[Command] = []
    start, parts = 0, []
    for number, raw in body:
        text = raw.strip()
        if not parts and (not text or text.startswith("#")):
            continue
        if not parts:
            start = number
        if text.endswith("\\"):
            parts.append(text[:-1].rstrip())
            continue
        parts.append(text)
        commands.append(Command(start, " ".join(parts)))
        parts = []
    if parts:
        commands.append(Command(start, " ".join(parts)))
    return commands


def _console_commands(body: list[tuple[int, str]]) -> list[Command]:
    commands: list[Command] = []
    for number, raw in body:
        if raw.startswith("$ "):
            commands.append(Command(number, raw[2:].strip(), output=[]))
        elif commands and commands[-1].output is not None:
            commands[-1].output.append(raw)
    return commands


# ---- loose comparison of shown output -----------------------------------------------------------------------
# Ids, counts, times and sizes change from run to run, and column widths with them: every run of digits (with
# the punctuation of a time or a date) reads as one `#`, and runs of spaces as one space. An expected line `...`
# stands for any number of lines.
_VARIABLE = re.compile(r"\d[\d:.\-TZ+]*")


def normalize(line: str) -> str:
    return " ".join(_VARIABLE.sub("#", line).split())


def output_matches(expected: list[str], actual: str) -> bool:
    want = [normalize(x) for x in expected if x.strip()]
    got = [normalize(x) for x in actual.splitlines() if x.strip()]

    def match(w: int, g: int) -> bool:
        if w == len(want):
            return g == len(got)
        if want[w] == "...":
            return any(match(w + 1, k) for k in range(g, len(got) + 1))
        return g < len(got) and want[w] == got[g] and match(w + 1, g + 1)

    return match(0, 0)


def load(path: Path) -> list[Block]:
    return parse_readme(path.read_text())


# ---- commands named in the prose and tables --------------------------------------------------------------------
# Not run (they need a context: a node, a token), but checked against the CLI itself: each subcommand of a span
# `corral NOUN VERB ... --flag` must exist and each flag must be one its command takes. Grammar of a span, as the
# README writes it: `[...]` optional, `a|b` (`a\|b` in a table) alternatives, UPPER-case words placeholders,
# `...` more of the same, `--` the end of Corral's own arguments.
_SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")
_COMMAND = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(corral(?:\s.*)?)$")
_WORD = re.compile(r"[a-z][a-z0-9-]*")


def inline_commands(text: str) -> list[tuple[int, str]]:
    """(line, `corral ...` span) for every inline code span outside fences that is a corral command line (a span
    may wrap onto the next line, as prose does)."""
    prose, fenced = [], False
    for line in text.splitlines():
        fence = line.startswith("```")
        prose.append("" if fenced or fence else line)  # fences blanked, so line numbers stay
        fenced ^= fence
    joined = "\n".join(prose)
    found: list[tuple[int, str]] = []
    for m in _SPAN.finditer(joined):
        command = _COMMAND.match(" ".join(m[1].split()))
        if command:
            found.append((joined.count("\n", 0, m.start()) + 1, command[1]))
    return found


def check_command_span(span: str, help_of: Callable[[tuple[str, ...]], str]) -> list[str]:
    """What in one `corral ...` span the CLI does not have; `help_of(path)` is `corral PATH --help`'s text."""
    cleaned = span.replace("\\|", "|").replace("[", " ").replace("]", " ")
    try:
        tokens = shlex.split(cleaned)[1:]
    except ValueError:
        tokens = cleaned.split()[1:]
    paths: list[tuple[str, ...]] = [()]
    seen = list(paths)  # a flag may belong to a group as well as to its subcommands (`corral nodes [drain] [--json]`)
    walking, flags, problems = True, [], []
    for tok in tokens:
        if tok == "--":
            break
        if tok.startswith("-"):
            flags.append(tok.split("=", 1)[0])
            walking = False
            continue
        alternatives = [a for a in tok.split("|") if a]
        if not walking or not alternatives or tok == "...":
            walking = False
            continue
        grown: list[tuple[str, ...]] = []
        for path in paths:
            subcommands = subcommands_in(help_of(path))
            words = [a for a in alternatives if _WORD.fullmatch(a)]
            if not subcommands or not words:  # an argument (or a placeholder): the path is complete
                grown.append(path)
                continue
            for word in words:
                if word in subcommands:
                    grown.append((*path, word))
                else:
                    problems.append(f"`{' '.join(('corral', *path, word))}`: no such command")
        walking = grown != paths
        paths = grown or paths
        seen += [p for p in paths if p not in seen]
    for flag in flags:
        if not any(flag in flags_in(help_of(path)) for path in seen):
            where = " / ".join("corral " + " ".join(p) for p in paths)
            problems.append(f"`{where}` has no flag {flag}")
    return problems


def subcommands_in(help_text: str) -> set[str]:
    """The subcommands a click help lists under `Commands:`."""
    _, sep, rest = help_text.partition("\nCommands:\n")
    return set(re.findall(r"^  ([a-z][\w-]*)", rest, re.MULTILINE)) if sep else set()


def flags_in(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", help_text))
