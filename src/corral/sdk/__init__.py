"""The typed Python client for Corral's REST API, used by the CLI, the agent, tests and users.

The clients load on first use (`from corral.sdk import CorralClient`), so that `corral.sdk.errors` and
`corral.sdk.rest` (the CLI's light path) do not pull in httpx and the API schemas."""

from __future__ import annotations

from corral.sdk.errors import CorralAPIError, CorralConnectionError, CorralSDKError

TYPE_CHECKING = False  # not typing's: the CLI's light path does not import typing (a few ms per call)
if TYPE_CHECKING:
    from typing import Any

    from corral.sdk.client import AgentClient, CorralClient

__all__ = ["AgentClient", "CorralAPIError", "CorralClient", "CorralConnectionError", "CorralSDKError"]


def __getattr__(name: str) -> Any:
    if name in ("AgentClient", "CorralClient"):
        from corral.sdk import client

        return getattr(client, name)
    raise AttributeError(f"module 'corral.sdk' has no attribute {name!r}")
