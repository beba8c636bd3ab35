"""Limits on what the API accepts, and the checks behind them: sizes that keep a job's argv and environment well
under the kernel's ARG_MAX, integers that fit the database's 64 bits, text without NUL or control characters."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

INT64_MAX = 2**63 - 1  # the widest integer column (BIGINT); SQLite refuses more with an OverflowError
INT32_MAX = 2**31 - 1  # an INTEGER column on PostgreSQL: ids, counts, ports, priorities
MAX_ID = INT32_MAX

# A job's command line and environment. Linux refuses one string over MAX_ARG_STRLEN (128 KiB) and the whole argv
# + envp over ARG_MAX (stack limit / 4, 2 MiB by default) with E2BIG; the agent adds its own CORRAL_*/CUDA_*
# variables, so the job's share stays at a quarter of that.
MAX_ARGS = 4096
MAX_ARG_BYTES = 64 * 1024
MAX_ENV_VARS = 512
MAX_ENV_KEY_CHARS = 128
MAX_ENV_VALUE_BYTES = 64 * 1024
MAX_ARGV_ENV_BYTES = 512 * 1024
MAX_EXEC_BYTES = 1536 * 1024  # with tenant secrets (counted at their largest): 512 KiB left to Corral's variables
MAX_JOB_NAME_CHARS = 255
MAX_PATH_CHARS = 4096
MAX_LABELS = 64
MAX_LABEL_KEY_CHARS = 128
MAX_LABEL_VALUE_CHARS = 256

# Resources: far beyond any machine, far below 2^63.
MAX_MEMORY_MIB = 1 << 30  # 1 PiB
MAX_CPU_MILLI = 1 << 30  # a million cores
MAX_GPUS_PER_NODE = 1024
MAX_TIME_LIMIT_S = 366 * 86400

MAX_IDEMPOTENCY_KEY_CHARS = 255
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]+$"  # visible ASCII: a UUID, a ULID, a hash

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # tab and newline allowed (command arguments may hold them)
_CONTROL_OR_NEWLINE = re.compile(r"[\x00-\x1f\x7f]")


def printable(value: str, limit: int) -> str:
    """`value` with control characters (NUL, escapes, newlines) replaced by spaces, at most `limit` characters: for
    text a node or a registry wrote that is stored and shown back (an exit reason), kept rather than refused."""
    return _CONTROL_OR_NEWLINE.sub(" ", value[:limit])


def problem_in_text(value: str, *, single_line: bool = False) -> str | None:
    """Why `value` cannot be stored and shown as text (NUL or terminal control characters), or None."""
    if "\x00" in value:
        return "NUL bytes are not allowed"
    bad = (_CONTROL_OR_NEWLINE if single_line else _CONTROL).search(value)
    if bad:
        return f"control character {bad.group()!r} is not allowed"
    return None


def exec_string_bytes(value: str) -> int:
    """What one argv or envp string costs the kernel: its UTF-8 bytes, its NUL and its pointer."""
    return len(value.encode("utf-8", "surrogatepass")) + 1 + 8


def problem_in_command(command: Iterable[str]) -> str | None:
    for i, arg in enumerate(command):
        if "\x00" in arg:
            return f"item {i}: NUL bytes are not allowed"
        if len(arg.encode("utf-8", "surrogatepass")) > MAX_ARG_BYTES:
            return f"item {i}: longer than {MAX_ARG_BYTES} bytes"
    return None


def problem_in_env(env: Mapping[str, str]) -> str | None:
    for key, value in env.items():
        if "\x00" in value:
            return f"{key}: NUL bytes are not allowed"
        if len(value.encode("utf-8", "surrogatepass")) > MAX_ENV_VALUE_BYTES:
            return f"{key}: value longer than {MAX_ENV_VALUE_BYTES} bytes"
    return None


def argv_env_bytes(command: Iterable[str], env: Mapping[str, str]) -> int:
    return sum(exec_string_bytes(a) for a in command) + sum(exec_string_bytes(f"{k}={v}") for k, v in env.items())


MAX_REQUEST_BYTES = 8 * 1024 * 1024  # the largest body: a log chunk (1 MiB) or a job of 512 KiB escaped in JSON
# All the request bodies one listener's guard (server/inputs.py) holds at once, whatever the callers: sixteen of the
# largest. Past it a body is answered 503 "busy" with Retry-After, instead of the process holding one per connection.
MAX_REQUEST_BODIES_BYTES = 128 * 1024 * 1024
