"""Replica health: GET health_path on every endpoint of every route, concurrently, every probe_interval_s.

An endpoint is ready after a 2xx; it stops being ready at once when its connection is refused (by a probe, or by a
request the gateway forwarded: passive health), and after `fail_threshold` consecutive other failures (a timeout, a
non-2xx answer). Health is kept per (job id, attempt): a new attempt of the same job starts unready. An endpoint
not yet ready is probed more often (`unready_probe_interval_s`), so a replica starting up (scale from zero, a
rolling update) takes traffic soon after it answers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import httpx

from corral.gateway.model import Endpoint, ServiceRoute

log = logging.getLogger(__name__)
NOT_PROBED = "not probed yet"


@dataclass(slots=True)
class _Health:
    endpoint: Endpoint
    health_path: str
    ready: bool = False
    failures: int = 0  # consecutive, since the last 2xx
    ready_since: float | None = None  # wall clock
    detail: str = NOT_PROBED  # the last failure in words; "" after a 2xx
    next_probe_at: float = 0.0  # monotonic
    probing: bool = False
    seen: bool = field(default=True)


class Prober:
    def __init__(
        self,
        client: httpx.AsyncClient,
        probe_interval_s: float = 1.0,
        fail_threshold: int = 2,
        timeout_s: float = 1.0,
        unready_probe_interval_s: float = 0.25,
        on_ready: Callable[[Endpoint], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._interval_s = probe_interval_s
        self._unready_interval_s = min(unready_probe_interval_s, probe_interval_s)
        self._fail_threshold = max(1, fail_threshold)
        self._timeout = httpx.Timeout(timeout_s)
        self._on_ready = on_ready
        self._clock = clock
        self._health: dict[tuple[int, int], _Health] = {}
        self._latest_attempt: dict[int, tuple[int, int]] = {}  # job id -> the key detail() reports on
        self._tasks: set[asyncio.Task[None]] = set()

    # ---- what the gateway and the controller read ------------------------------------------------------------

    def ready(self, job_id: int, attempt: int) -> bool:
        h = self._health.get((job_id, attempt))
        return h is not None and h.ready

    def ready_since(self, job_id: int, attempt: int) -> float | None:
        """Since when (wall clock, seconds) the endpoint has been ready without a break; None while it is not."""
        h = self._health.get((job_id, attempt))
        return h.ready_since if h is not None and h.ready else None

    def detail(self, job_id: int) -> str:
        """The last failure of the job's latest known attempt in words ("GET /healthz: connection refused",
        "GET /healthz answered 500"); "" when its last probe passed; "not probed yet"; "" for an unknown job."""
        key = self._latest_attempt.get(job_id)
        h = self._health.get(key) if key is not None else None
        return h.detail if h is not None else ""

    # ---- what the gateway tells it ---------------------------------------------------------------------------

    def update_routes(self, routes: Mapping[str, ServiceRoute]) -> None:
        """Probe what the routes name from now on; forget endpoints that left them. New endpoints are due at once."""
        for old in self._health.values():
            old.seen = False
        for route in routes.values():
            for ep in route.endpoints:
                h: _Health | None = self._health.get(ep.key)
                if h is None or h.endpoint != ep or h.health_path != route.health_path:
                    # new, or moved (another host or port, another health path): start over, unready
                    h = self._health[ep.key] = _Health(ep, route.health_path)
                h.seen = True
                latest = self._latest_attempt.get(ep.job_id)
                if latest is None or latest[1] <= ep.attempt:
                    self._latest_attempt[ep.job_id] = ep.key
        for key in [k for k, h in self._health.items() if not h.seen]:
            del self._health[key]
        live = self._health.keys()
        for job_id in [j for j, key in self._latest_attempt.items() if key not in live]:
            del self._latest_attempt[job_id]

    def mark_unreachable(self, endpoint: Endpoint, why: str) -> None:
        """A forwarded request could not connect: unready at once, until a probe passes again."""
        h = self._health.get(endpoint.key)
        if h is not None:
            self._fail(h, why, at_once=True)

    # ---- probing ---------------------------------------------------------------------------------------------

    async def run(self, tick_s: float = 0.05) -> None:
        """Probe whatever is due, forever (until cancelled); each probe in a task of its own."""
        try:
            while True:
                self.start_due_probes()
                await asyncio.sleep(tick_s)
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def start_due_probes(self) -> None:
        now = time.monotonic()
        for h in self._health.values():
            if not h.probing and h.next_probe_at <= now:
                h.probing = True
                task = asyncio.create_task(self._probe(h))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def probe_all(self) -> None:
        """One round over every endpoint, now (what tests use instead of waiting for run())."""
        await asyncio.gather(*(self._probe(h) for h in list(self._health.values())))

    async def _probe(self, h: _Health) -> None:
        ep, path = h.endpoint, h.health_path
        netloc = f"[{ep.host}]" if ":" in ep.host else ep.host
        what = f"GET {path}"
        try:
            response = await self._client.get(f"http://{netloc}:{ep.port}{path}", timeout=self._timeout)
        except httpx.ConnectError as e:
            self._fail(h, f"{what}: {describe_failure(e)}", at_once=True)
        except httpx.TimeoutException:
            self._fail(h, f"{what}: no answer within {self._timeout.read:g} s")
        except httpx.HTTPError as e:
            self._fail(h, f"{what}: {describe_failure(e)}")
        else:
            if 200 <= response.status_code < 300:
                self._pass(h)
            else:
                self._fail(h, f"{what} answered {response.status_code}")
        finally:
            h.probing = False
            h.next_probe_at = time.monotonic() + (self._interval_s if h.ready else self._unready_interval_s)

    def _pass(self, h: _Health) -> None:
        h.failures, h.detail = 0, ""
        if not h.ready:
            h.ready, h.ready_since = True, self._clock()
            if self._on_ready is not None and self._health.get(h.endpoint.key) is h:
                with contextlib.suppress(Exception):
                    self._on_ready(h.endpoint)

    def _fail(self, h: _Health, why: str, at_once: bool = False) -> None:
        h.failures += 1
        h.detail = why
        if h.ready and (at_once or h.failures >= self._fail_threshold):
            log.info("replica job %s attempt %s no longer ready: %s", h.endpoint.job_id, h.endpoint.attempt, why)
            h.ready, h.ready_since = False, None


def describe_failure(e: Exception) -> str:
    """An httpx failure in words: "connection refused" when the cause was one (anyio hides it under "All connection
    attempts failed"), else the error's type and text."""
    cause: BaseException | None = e
    for _ in range(8):
        if cause is None:
            break
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        cause = cause.__cause__ or cause.__context__
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
