"""The SDK's errors, apart from any HTTP library so that the CLI's light path can raise and catch them too."""

from __future__ import annotations

from corral.sdk import litejson

TYPE_CHECKING = False  # not typing's: the CLI's light path does not import typing (a few ms per call)
if TYPE_CHECKING:
    from typing import Any


class CorralSDKError(Exception):
    """Base of every error the SDK raises; str() is a one-line message for humans."""


class CorralConnectionError(CorralSDKError):
    pass


class CorralAPIError(CorralSDKError):
    def __init__(self, status: int, code: str, message: str, field: str | None, body: dict[str, Any]) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field, self.body = status, code, message, field, body


def compute_timeout_error(url: str, e: BaseException) -> CorralConnectionError:
    return CorralConnectionError(f"server at {url} did not answer in time ({type(e).__name__})")


def compute_unreachable_error(url: str, e: BaseException) -> CorralConnectionError:
    """No answer from `url`; an untrusted certificate says how to trust the cluster CA."""
    if "CERTIFICATE_VERIFY_FAILED" in str(e):
        return CorralConnectionError(
            f"the certificate of {url} is not trusted here ({e}); get the cluster CA's fingerprint from the "
            "operator and run `corral login USER --ca-fingerprint sha256:...`, or set CORRAL_CA_FILE"
        )
    return CorralConnectionError(f"cannot reach the Corral server at {url}: {e}")


def compute_api_error(status: int, reason: str, content: bytes) -> CorralAPIError:
    """The error an answer >= 400 stands for: the server's `{"error": {code, message, field}}` when it sent one."""
    try:
        body = litejson.loads(content)
        err = body.get("error", {})
        message, code, field = err.get("message") or reason, err.get("code", "error"), err.get("field")
    except (ValueError, AttributeError):
        text = content.decode("utf-8", "replace")
        body, message, code, field = {}, text[:200] or reason, "error", None
    if status == 401:
        message = f"authentication failed: {message}"
    return CorralAPIError(status, code, message, field, body)


def compute_failover_error(
    failures: list[CorralConnectionError], may_be_applied: bool = False
) -> CorralConnectionError:
    """One error for a request that no replica answered: each URL tried and what happened there, in order.
    `may_be_applied`: the last one may have received it, so it was not sent on (it is not idempotent)."""
    if len(failures) == 1 and not may_be_applied:
        return failures[0]
    tried = "; ".join(str(e) for e in failures)
    if may_be_applied:
        return CorralConnectionError(
            f"{tried} (not sent to another server: the request may have reached this one and cannot be repeated)"
        )
    return CorralConnectionError(f"no Corral server answered ({len(failures)} tried): {tried}")
