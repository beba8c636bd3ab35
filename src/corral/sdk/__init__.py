"""The typed Python client for Corral's REST API, used by the CLI, the agent, tests and users."""

from corral.sdk.client import AgentClient, CorralAPIError, CorralClient, CorralConnectionError, CorralSDKError

__all__ = ["AgentClient", "CorralAPIError", "CorralClient", "CorralConnectionError", "CorralSDKError"]
