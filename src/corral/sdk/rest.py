"""A small JSON client on the standard library's http.client, for the CLI's everyday commands (submit, jobs,
show, logs, cancel, wait): it starts in a few milliseconds where httpx and the API's pydantic schemas take a
few hundred. It answers plain JSON values and raises the SDK's own errors, worded as CorralClient words them.
Everything else (and every Python user) goes through `corral.sdk.client.CorralClient`."""

from __future__ import annotations

import http.client
import json
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlencode, urlsplit

from corral.sdk.errors import (
    CorralConnectionError,
    compute_api_error,
    compute_timeout_error,
    compute_unreachable_error,
)

if TYPE_CHECKING:
    import ssl


class RestResponse:
    __slots__ = ("content", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], content: bytes) -> None:
        self.status, self.headers, self.content = status, headers, content

    def json(self) -> Any:
        return json.loads(self.content)


class RestClient:
    """One keep-alive connection to `url` with a bearer `token`. `verify`: an SSLContext trusting the cluster CA,
    or True (the system's CAs) for an https:// URL."""

    def __init__(self, url: str, token: str, timeout_s: float = 30.0, verify: ssl.SSLContext | bool = True) -> None:
        self.url = url.rstrip("/")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CorralConnectionError(f"cannot reach the Corral server at {url}: not an http:// or https:// URL")
        self._prefix = parts.path
        self._headers = {"Accept": "application/json", "User-Agent": "corral-cli"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._conn: http.client.HTTPConnection
        if parts.scheme == "https":
            import ssl

            ctx = verify if isinstance(verify, ssl.SSLContext) else ssl.create_default_context()
            self._conn = http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout_s, context=ctx)
        else:
            self._conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_s)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json_body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> RestResponse:
        """Send one request; an answer >= 400 raises CorralAPIError, no answer CorralConnectionError."""
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        hdrs = dict(self._headers, **(headers or {}))
        body = None
        if json_body is not None:
            body = json.dumps(json_body).encode()
            hdrs["Content-Type"] = "application/json"
        for attempt in (1, 2):
            try:
                self._conn.request(method, target, body=body, headers=hdrs)
                r = self._conn.getresponse()
                content = r.read()
                break
            except TimeoutError as e:
                self._conn.close()
                raise compute_timeout_error(self.url, e) from e
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                # A kept-alive connection the server closed meanwhile: open a new one once.
                self._conn.close()
                if attempt == 2:
                    raise compute_unreachable_error(self.url, e) from e
            except (OSError, http.client.HTTPException) as e:
                self._conn.close()
                raise compute_unreachable_error(self.url, e) from e
        out = RestResponse(r.status, {k.lower(): v for k, v in r.getheaders()}, content)
        if r.status >= 400:
            raise compute_api_error(r.status, r.reason, content)
        return out
