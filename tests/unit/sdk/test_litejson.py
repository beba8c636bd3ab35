"""corral.sdk.litejson is json without loading it (the CLI's light path, issue 13): on any JSON value and any text
it answers what json.dumps and json.loads answer, and refuses what they refuse, with the same error."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from corral.sdk import litejson

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5), max_leaves=30
)


def same(a: Any, b: Any) -> bool:
    """Equal, NaN included (NaN != NaN), and of the same types all the way down."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


@given(values)
def test_dumps_writes_what_json_writes(value: Any) -> None:
    assert litejson.dumps(value) == json.dumps(value)


@given(values)
def test_loads_reads_back_what_json_reads(value: Any) -> None:
    text = json.dumps(value)
    assert same(litejson.loads(text), json.loads(text))
    assert same(litejson.loads(text.encode()), json.loads(text.encode()))
    spaced = f" \n{json.dumps(value, indent=2)}\t\r\n"
    assert same(litejson.loads(spaced), json.loads(spaced))


@given(st.text(alphabet=st.sampled_from(list('{}[]",:0123456789.eE+-tfnrulasINaf \n\\u')), max_size=30) | st.text())
def test_loads_refuses_what_json_refuses_with_its_error(text: str) -> None:
    try:
        expected: Any = json.loads(text)
    except json.JSONDecodeError as e:
        try:
            litejson.loads(text)
        except json.JSONDecodeError as mine:
            assert (mine.msg, mine.pos) == (e.msg, e.pos)
        else:
            raise AssertionError(f"{text!r} was read, json refuses it: {e}") from None
    else:
        assert same(litejson.loads(text), expected)


def test_what_json_cannot_write_is_refused_alike() -> None:
    for value in ({1j: 1}, object(), {"a": {1, 2}}):
        try:
            json.dumps(value)
        except TypeError as e:
            expected = str(e)
        try:
            litejson.dumps(value)
        except TypeError as e:
            assert str(e) == expected
        else:
            raise AssertionError(f"{value!r} was written")
    loop: list[Any] = []
    loop.append(loop)
    try:
        litejson.dumps(loop)
    except ValueError as e:
        assert "Circular reference" in str(e)
    else:
        raise AssertionError("a circular list was written")
    bad_utf8 = b'{"a": "\xff"}'
    try:
        litejson.loads(bad_utf8)
    except ValueError:
        pass
    else:
        raise AssertionError("bytes that are not UTF-8 were read")


def test_byte_order_marks_and_wide_encodings_read_as_json_reads_them() -> None:
    value = {"a": ["é", 1]}
    text = json.dumps(value, ensure_ascii=False)
    for raw in (
        text.encode("utf-8-sig"),
        text.encode("utf-16"),
        text.encode("utf-16-le"),
        text.encode("utf-32"),
        text.encode("utf-32-be"),
    ):
        assert litejson.loads(raw) == json.loads(raw) == value
    try:
        litejson.loads("\ufeff" + text)
    except json.JSONDecodeError as e:
        assert e.msg.startswith("Unexpected UTF-8 BOM")
    else:
        raise AssertionError("a str with a BOM was read")


@given(
    st.binary(max_size=24) | values.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass"))
)
def test_bytes_read_as_json_reads_them(raw: bytes) -> None:
    try:
        expected: Any = json.loads(raw)
    except ValueError:
        try:
            litejson.loads(raw)
        except ValueError:
            return
        raise AssertionError(f"{raw!r} was read, json refuses it") from None
    assert same(litejson.loads(raw), expected)


def test_json_itself_is_not_what_answers() -> None:
    # the point of the module: json (and re with it) stays unloaded (tests/unit/cli/test_cli_light_path.py)
    assert litejson.loads.__module__ == "corral.sdk.litejson" and "_c_functions" in litejson.loads.__qualname__
