"""A small JSON client on corral.sdk.wire (HTTP/1.1 on a socket: the standard library's http.client takes ~17 ms
to import), for the CLI's everyday commands (submit, jobs, show, logs, cancel, wait): it starts in a few
milliseconds where httpx and the API's pydantic schemas take a few hundred. It answers plain JSON values and
raises the SDK's own errors, worded as CorralClient words them. Everything else (and every Python user) goes
through `corral.sdk.client.CorralClient`."""

from __future__ import annotations

import select

from corral.sdk import litejson
from corral.sdk.endpoints import CONNECT_TIMEOUT_S, FAILOVER_STATUS, Endpoints, compute_may_resend, split_url
from corral.sdk.errors import (
    CorralConnectionError,
    CorralSDKError,
    compute_api_error,
    compute_failover_error,
    compute_timeout_error,
    compute_unreachable_error,
)
from corral.sdk.wire import ProtocolError, RemoteDisconnected, WireConnection

TYPE_CHECKING = False  # not typing's: the CLI's light path does not import typing (a few ms per call)
if TYPE_CHECKING:
    import ssl
    from collections.abc import Sequence
    from typing import Any, Self


_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


def _quote_plus(value: object) -> str:
    raw = value if isinstance(value, bytes) else str(value).encode()
    return "".join(chr(b) if b in _UNRESERVED else "+" if b == 32 else f"%{b:02X}" for b in raw)


def encode_query(params: dict[str, Any]) -> str:
    """`urllib.parse.urlencode(params)` (each key and value as its str() in UTF-8, or as bytes, a space as `+`),
    without loading urllib.parse and `re` on the CLI's light path (tests/unit/sdk/test_split_url.py holds the two
    equal)."""
    return "&".join(f"{_quote_plus(k)}={_quote_plus(v)}" for k, v in params.items())


class RestResponse:
    __slots__ = ("content", "headers", "reason", "status")

    def __init__(self, status: int, headers: dict[str, str], content: bytes, reason: str = "") -> None:
        self.status, self.headers, self.content, self.reason = status, headers, content, reason

    def json(self) -> Any:
        return litejson.loads(self.content)


class RestClient:
    """Keep-alive connections to `url` with a bearer `token`. `verify`: an SSLContext trusting the cluster CA,
    or True (the system's CAs) for an https:// URL. `url` may name several replicas (comma-separated, or a list):
    see corral.sdk.endpoints for which one a request goes to."""

    def __init__(
        self, url: str | Sequence[str], token: str, timeout_s: float = 30.0, verify: ssl.SSLContext | bool = True
    ) -> None:
        try:
            self._endpoints = Endpoints(url)
        except ValueError as e:
            raise CorralConnectionError(str(e)) from e
        self._timeout_s = timeout_s
        self._headers = {"Accept": "application/json", "User-Agent": "corral-cli"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._prefixes: dict[str, str] = {}
        self._conns: dict[str, WireConnection] = {}
        for u in self._endpoints.urls:
            parts = split_url(u)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                shown = url if isinstance(url, str) and not self._endpoints.several else u
                raise CorralConnectionError(
                    f"cannot reach the Corral server at {shown}: not an http:// or https:// URL"
                )
            self._prefixes[u] = parts.path
            if parts.scheme == "https":
                import ssl

                ctx = verify if isinstance(verify, ssl.SSLContext) else ssl.create_default_context()
                self._conns[u] = WireConnection(parts.hostname, parts.port or 443, timeout_s, ctx)
            else:
                self._conns[u] = WireConnection(parts.hostname, parts.port or 80, timeout_s)

    @property
    def url(self) -> str:
        """The server's URL: with several, the one that answered last."""
        return self._endpoints.current

    @property
    def urls(self) -> tuple[str, ...]:
        return self._endpoints.urls

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()

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
        """Send one request; an answer >= 400 raises CorralAPIError, no answer CorralConnectionError. With
        several URLs it fails over as corral.sdk.endpoints says."""
        query = f"?{encode_query(params)}" if params else ""
        hdrs = dict(self._headers, **(headers or {}))
        body = None
        if json_body is not None:
            body = litejson.dumps(json_body).encode()
            hdrs["Content-Type"] = "application/json"
        if not self._endpoints.several:
            out = self._exchange(self.url, method, path + query, body, hdrs)
            if out.status >= 400:
                raise compute_api_error(out.status, out.reason, out.content)
            return out
        return self._request_failover(method, path + query, body, hdrs)

    def _request_failover(self, method: str, target: str, body: bytes | None, hdrs: dict[str, str]) -> RestResponse:
        may_resend = compute_may_resend(method, hdrs)
        failures: list[CorralConnectionError] = []
        unavailable: RestResponse | None = None
        for url in self._endpoints.compute_order():
            conn = self._conns[url]
            if conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
                conn.close()  # an idle kept-alive connection is readable only when the server closed it
            if conn.sock is None:  # a new connection: nothing is sent until it is up
                try:
                    self._connect(conn)
                except (OSError, ProtocolError) as e:
                    conn.close()
                    failures.append(
                        compute_timeout_error(url, e)
                        if isinstance(e, TimeoutError)
                        else compute_unreachable_error(url, e)
                    )
                    self._endpoints.mark_failed(url)
                    continue
            try:
                out = self._exchange(url, method, target, body, hdrs)
            except CorralConnectionError as e:
                failures.append(e)
                self._endpoints.mark_failed(url)
                if may_resend:
                    continue
                raise compute_failover_error(failures, may_be_applied=True) from e
            if out.status == FAILOVER_STATUS and may_resend:
                unavailable = out
                self._endpoints.mark_failed(url)
                continue
            self._endpoints.mark_answered(url)
            if out.status >= 400:
                raise compute_api_error(out.status, out.reason, out.content)
            return out
        if unavailable is not None:  # an answer, even "unavailable", says more than no answer
            raise compute_api_error(unavailable.status, unavailable.reason, unavailable.content)
        raise compute_failover_error(failures)

    def _connect(self, conn: WireConnection) -> None:
        """Open `conn` waiting at most CONNECT_TIMEOUT_S (TLS handshake included), then read with the full timeout."""
        conn.timeout = min(self._timeout_s, CONNECT_TIMEOUT_S)
        try:
            conn.connect()
        finally:
            conn.timeout = self._timeout_s
        if conn.sock is not None:
            conn.sock.settimeout(self._timeout_s)

    def _exchange(self, url: str, method: str, target: str, body: bytes | None, hdrs: dict[str, str]) -> RestResponse:
        """One request to `url` and its answer, whatever its status; CorralConnectionError when none came."""
        conn = self._conns[url]
        target = self._prefixes[url] + target
        for attempt in (1, 2):
            try:
                conn.request(method, target, body=body, headers=hdrs)
                r = conn.getresponse()
                content = r.read()
                break
            except TimeoutError as e:
                conn.close()
                raise compute_timeout_error(url, e) from e
            except (RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                # A kept-alive connection the server closed meanwhile: open a new one once.
                conn.close()
                if attempt == 2:
                    raise compute_unreachable_error(url, e) from e
            except (OSError, ProtocolError) as e:
                conn.close()
                raise compute_unreachable_error(url, e) from e
            except ValueError as e:  # the request itself cannot be written (a line break in the token, say)
                raise CorralSDKError(f"cannot send the request: {e}") from None
        return RestResponse(r.status, {k.lower(): v for k, v in r.getheaders()}, content, r.reason)
