"""Several base URLs for one cluster (server replicas): splitting and checking them, and which to try first.

A client given several URLs sends each request to the one that answered last and, when that one cannot be
reached, to the next, each at most once per request. What may be sent again after it may have reached a server
is decided here (`compute_may_resend`); the SDK's clients (corral.sdk.client, corral.sdk.rest) do the sending.
Standard library only: the CLI's light path loads it, and it loads urllib.parse (with `re`, ~5 ms of a CLI call)
only for a URL of an unusual shape (split_url)."""

from __future__ import annotations

from _thread import allocate_lock

TYPE_CHECKING = False  # not typing's: the CLI's light path does not import typing
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

# Methods that HTTP defines as idempotent: sending one twice leaves the server as sending it once does.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
# The one answer that sends a request on to the next replica (when it may be sent again): a replica starting,
# stopping, or cut off from what it depends on says 503 before it has done anything.
FAILOVER_STATUS = 503
# With several URLs, how long a connection attempt waits before the next replica is tried (one that is down
# and drops packets would otherwise hold the request for its whole timeout).
CONNECT_TIMEOUT_S = 5.0


_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")
_PATH_CHARS = _HOST_CHARS | frozenset("/_~")


class UrlParts:
    """The parts of a plain base URL, as urllib.parse.urlsplit's answer names them."""

    __slots__ = ("hostname", "path", "port", "scheme")
    username = password = None
    query = fragment = ""

    def __init__(self, scheme: str, hostname: str, port: int | None, path: str) -> None:
        self.scheme, self.hostname, self.port, self.path = scheme, hostname, port, path


def split_url(url: str) -> UrlParts:
    """`urllib.parse.urlsplit(url)`, as far as its scheme, hostname, port (ValueError when it is not a port), path,
    username, password, query and fragment go. The usual shape (`http[s]://host[:port][/path]`, the host a name or
    an IPv4 address, the path of letters, digits and `/-._~`) is read here; anything else by urlsplit itself
    (tests/unit/sdk/test_split_url.py holds the two readings equal on generated URLs)."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("http", "https"):
        authority, slash, path = rest.partition("/")
        host, colon, port = authority.partition(":")
        if (
            host
            and _HOST_CHARS.issuperset(host)
            and (not colon or (port.isascii() and port.isdigit() and len(port) <= 5))
            and _PATH_CHARS.issuperset(path)
        ):
            number = int(port) if colon else None
            if number is None or number <= 65535:
                return UrlParts(scheme, host.lower(), number, slash + path)
    from urllib.parse import urlsplit

    return urlsplit(url)  # type: ignore[return-value]  # the same attributes


def split_urls(value: str | Sequence[str]) -> list[str]:
    """The base URLs in `value` (a comma-separated string, or a list), without spaces around them or a trailing
    slash. A single URL is kept as given but for its trailing slash (as a client always did)."""
    if isinstance(value, str):
        if "," not in value:
            return [value.rstrip("/")]
        value = value.split(",")
    return [u.strip().rstrip("/") for u in value]


def check_url(url: str) -> str | None:
    """What is wrong with `url` as a Corral server's base URL, or None."""
    if not url:
        return "an empty URL (a comma too many?)"
    if any(c.isspace() for c in url):
        return f"{url!r} contains a space"
    parts = split_url(url)
    if parts.scheme not in ("http", "https"):
        return f"{url!r} is not an http:// or https:// URL"
    if not parts.hostname:
        return f"{url!r} names no host"
    try:
        port = parts.port
    except ValueError:
        return f"{url!r} has a port that is not a number from 1 to 65535"
    if port == 0:
        return f"{url!r} has a port that is not a number from 1 to 65535"
    if parts.username is not None or parts.password is not None:
        return f"{parts.scheme}://{parts.hostname}: a user or password in the URL (give the token in CORRAL_TOKEN)"
    if parts.query or parts.fragment:
        return f"{url!r} has a query or fragment (give the server's base URL, e.g. https://head:8600)"
    return None


def parse_urls(value: str | Sequence[str]) -> list[str]:
    """The checked base URLs in `value`; ValueError naming every bad one (and a URL given twice)."""
    urls = split_urls(value)
    if not urls or urls == [""]:
        raise ValueError("no URL given")
    problems = [p for p in map(check_url, urls) if p]
    problems += [f"{u} is given twice" for i, u in enumerate(urls) if u and u in urls[:i]]
    if problems:
        raise ValueError("; ".join(problems))
    return urls


def compute_may_resend(method: str, headers: Mapping[str, str] | None) -> bool:
    """Whether a request may be sent again (to another replica) after it may have reached one: an idempotent
    method, or one carrying an Idempotency-Key (the servers dedupe those in their shared database)."""
    if method.upper() in IDEMPOTENT_METHODS:
        return True
    return any(k.lower() == "idempotency-key" for k in (headers or {}))


class Endpoints:
    """The base URLs of one cluster's replicas and which answered last; shared by threads (an agent's long
    poll, telemetry and log shipping use one client)."""

    def __init__(self, value: str | Sequence[str]) -> None:
        urls = split_urls(value)
        if len(urls) > 1 or not isinstance(value, str):  # a list: "a,,b" or "a," name two and one server
            urls = [u for u in urls if u]
        if not urls:
            raise ValueError("no Corral server URL given")
        self.urls = tuple(urls)
        self._current = 0
        self._lock = allocate_lock()

    @property
    def several(self) -> bool:
        return len(self.urls) > 1

    @property
    def current(self) -> str:
        """The URL a request goes to first: the one that answered last (the first one until then)."""
        return self.urls[self._current]

    def compute_order(self) -> list[str]:
        """Every URL once, the current one first, then the ones after it in the given order (wrapping)."""
        i = self._current
        return list(self.urls[i:] + self.urls[:i])

    def mark_answered(self, url: str) -> None:
        with self._lock:
            self._current = self.urls.index(url)

    def mark_failed(self, url: str) -> None:
        """`url` did not answer: the next request starts at the one after it (unless another thread moved on)."""
        with self._lock:
            i = self.urls.index(url)
            if self._current == i:
                self._current = (i + 1) % len(self.urls)
