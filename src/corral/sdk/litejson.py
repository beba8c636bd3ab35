"""JSON for the CLI's light path, without the `json` package's import: `loads` and `dumps` (compact, no indent) as
`json.loads` and `json.dumps` give them, through the same C scanner and encoder (CPython's `_json`).

Why: `import json` loads `re` (json.decoder and json.scanner compile regular expressions at import) and with it
`enum`, `functools` and `collections`: about 8 ms of a `corral submit` of ~45 ms (issue 13: a loop of submissions
from the shell). `_json` is the accelerator `json` itself uses, there since Python 2.6; where it is missing (another
interpreter) this module is `json`'s own functions. tests/unit/sdk/test_litejson.py holds both equal to `json` on
generated values. An error raised while decoding is json's `JSONDecodeError` (a ValueError), as from `json.loads`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the CLI's light path does not import typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_WHITESPACE = " \t\n\r"
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Decoding:
    """What `_json.make_scanner` reads from a `json.JSONDecoder()` with its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _not_serializable(o: object) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _json_loads(text: str | bytes | bytearray) -> Any:
    from json import loads as json_loads

    return json_loads(text)


def _json_dumps(obj: Any) -> str:
    from json import dumps as json_dumps

    return json_dumps(obj)


def _c_functions() -> tuple[Callable[[str | bytes], Any], Callable[[Any], str]]:
    """loads and dumps on `_json`'s scanner and encoder; raises when `_json` is missing or no longer takes what is
    given here (a private module: its signatures could change with an interpreter)."""
    from _json import encode_basestring_ascii as encode_str
    from _json import make_encoder, make_scanner

    scan = make_scanner(_Decoding())  # type: ignore[arg-type]  # any object with a JSONDecoder's attributes

    def loads(text: str | bytes) -> Any:
        """`json.loads(text)` (bytes: UTF-8 as json reads it; a BOM, UTF-16 or UTF-32 go to json itself)."""
        if isinstance(text, bytes | bytearray):
            if text[:1] in (b"\xef", b"\xfe", b"\xff") or b"\x00" in text[:4]:
                return _json_loads(text)
            s = text.decode("utf-8", "surrogatepass")
        else:
            s = text
        if s.startswith("\ufeff"):
            return _fail("Unexpected UTF-8 BOM (decode using utf-8-sig)", s, 0)
        start, end = 0, len(s)
        while start < end and s[start] in _WHITESPACE:
            start += 1
        try:
            obj, at = scan(s, start)
        except StopIteration as e:
            return _fail("Expecting value", s, e.value)
        while at < end and s[at] in _WHITESPACE:
            at += 1
        if at != end:
            return _fail("Extra data", s, at)
        return obj

    def dumps(obj: Any) -> str:
        """`json.dumps(obj)`: ASCII, ", " and ": " between items, NaN and infinities allowed, keys as given."""
        encode = make_encoder({}, _not_serializable, encode_str, None, ": ", ", ", False, False, True)
        return "".join(encode(obj, 0))

    sample = {"a": [1, 2.5, None, True, "\u00e9"], "b": {}}
    if loads(dumps(sample)) != sample or dumps(sample) != '{"a": [1, 2.5, null, true, "\\u00e9"], "b": {}}':
        raise RuntimeError("_json does not answer as json does")
    return loads, dumps


try:
    loads, dumps = _c_functions()
except Exception:  # pragma: no cover  (another interpreter, or one whose _json changed: json's own)
    loads, dumps = _json_loads, _json_dumps


def _fail(message: str, s: str, at: int) -> Any:
    from json import JSONDecodeError

    raise JSONDecodeError(message, s, at)
