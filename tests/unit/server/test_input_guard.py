"""The input guard's NUL detection on raw requests: where a NUL is, and what only looks like one."""

from __future__ import annotations

import pytest

from corral.server.inputs import nul_in_json, nul_in_path_or_query


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param(b'{"command": ["a\\u0000"]}', "command.0", id="in-a-list"),
        pytest.param(b'{"env": {"A": "x\\u0000y"}}', "env.A", id="in-a-value"),
        pytest.param(b'{"env": {"A\\u0000": "x"}}', "env", id="in-a-key"),
        pytest.param(b'"\\u0000"', "body", id="the-whole-document"),
        pytest.param(b'{"a": "\\\\\\u0000"}', "a", id="after-an-escaped-backslash"),
        pytest.param(b'{"a": "\\\\u0000"}', None, id="an-escaped-backslash-then-text"),
        pytest.param(b'{"a": "u0000 \\\\ 0000"}', None, id="no-escape-at-all"),
        pytest.param(b'{"a": "\\u0000', None, id="not-json-left-to-the-route"),
    ],
)
def test_nul_in_json(body: bytes, field: str | None) -> None:
    assert nul_in_json(body) == field


@pytest.mark.parametrize(
    ("path", "query", "field"),
    [
        pytest.param("/api/v1/nodes/a\x00b", b"", "path", id="path"),
        pytest.param("/api/v1/jobs", b"node=a%00b&limit=3", "node", id="query-value"),
        pytest.param("/api/v1/jobs", b"no%00de=x", "node", id="query-name"),
        pytest.param("/api/v1/jobs", b"node=a%2500b", None, id="an-escaped-percent"),
    ],
)
def test_nul_in_path_or_query(path: str, query: bytes, field: str | None) -> None:
    assert nul_in_path_or_query({"path": path, "query_string": query}) == field
