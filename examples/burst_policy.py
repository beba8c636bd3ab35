"""An autoscaling policy module (docs/elastic.md): burst only for the `research` tenant's jobs, and only on
weekdays; idle nodes are still released every day. Point a pool at it with
`corral pool update POOL --policy burst_policy` (with this folder on the server's PYTHONPATH)."""

from __future__ import annotations

from corral.autoscaler.model import AutoscaleState, Launch, Release
from corral.autoscaler.policy import decide as builtin


def decide(state: AutoscaleState) -> list[Launch | Release]:
    if state.now.weekday() >= 5:  # Saturday, Sunday: no new nodes, idle ones still go
        return [a for a in builtin(state) if isinstance(a, Release)]
    return builtin(state.only_tenants(["research"]))
