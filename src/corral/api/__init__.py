"""What the server shares with its clients (the SDK, the agent, the CLI): the wire schemas and default paths.

Sits beside the scheduler-layer packages: it may import `corral.core` only.
"""
