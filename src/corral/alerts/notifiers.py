"""Notifiers: webhook (JSON with a Slack-compatible `text`) and e-mail (SMTP), and a dispatcher that
delivers in the background with retries and backoff so a dead endpoint never blocks the server."""

from __future__ import annotations

import logging
import queue
import smtplib
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any, Protocol

import httpx

from corral.alerts.evaluator import AlertChange, AlertState
from corral.core.errors import CorralError

log = logging.getLogger(__name__)


class NotifierError(CorralError):
    """A delivery failed (endpoint unreachable, refused, or answered an error)."""

    code = "notifier"


def render_alert(change: AlertChange) -> dict[str, Any]:
    a = change.alert
    return {
        "status": a.state.value,
        "rule": a.rule,
        "severity": a.severity.value,
        "summary": a.summary,
        "labels": a.label_map,
        "value": a.value,
        "fingerprint": a.fingerprint,
        "active_since": a.active_since,
        "fired_at": a.fired_at,
        "resolved_at": a.resolved_at,
    }


def render_text_line(change: AlertChange) -> str:
    a = change.alert
    return f"[{a.state.value.upper()}] {a.severity.value} {a.rule}: {a.summary}"


def render_webhook_body(changes: Sequence[AlertChange]) -> dict[str, Any]:
    """Slack (and Mattermost, Teams connectors) show `text`; other receivers read the structured fields."""
    firing = any(c.alert.state is AlertState.FIRING for c in changes)
    return {
        "text": "\n".join(render_text_line(c) for c in changes),
        "source": "corral",
        "status": AlertState.FIRING.value if firing else AlertState.RESOLVED.value,
        "alerts": [render_alert(c) for c in changes],
    }


def render_email(changes: Sequence[AlertChange], sender: str, recipients: Sequence[str]) -> EmailMessage:
    counts: dict[str, int] = {}
    for c in changes:
        counts[c.alert.state.value] = counts.get(c.alert.state.value, 0) + 1
    rules = sorted({c.alert.rule for c in changes})
    message = EmailMessage()
    message["Subject"] = f"[Corral] {', '.join(f'{n} {s}' for s, n in sorted(counts.items()))}: {', '.join(rules)}"
    message["From"] = sender
    message["To"] = ", ".join(recipients)
    lines = []
    for c in changes:
        labels = ", ".join(f"{k}={v}" for k, v in c.alert.labels)
        lines.append(f"{render_text_line(c)}\n    labels: {labels}\n    value: {c.alert.value:g}")
    message.set_content("\n\n".join(lines) + "\n")
    return message


class Notifier(Protocol):
    """Where notifications go. Implementations: WebhookNotifier, EmailNotifier."""

    name: str

    def send(self, changes: Sequence[AlertChange]) -> None:
        """Deliver one notification for `changes` (non-empty), once. Blocks up to the notifier's timeout.
        Raises NotifierError on any failure; retrying is the dispatcher's business."""
        ...


class WebhookNotifier:
    """POSTs render_webhook_body() as JSON. Any 2xx is success. `transport` is for tests."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        timeout_s: float = 5.0,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.name = name
        self.url = url
        self._client = httpx.Client(timeout=timeout_s, headers=headers or {}, transport=transport)

    def send(self, changes: Sequence[AlertChange]) -> None:
        try:
            response = self._client.post(self.url, json=render_webhook_body(changes))
        except httpx.HTTPError as e:
            detail = str(e).replace(self.url, "<url>")  # the URL may carry a token: never in status or logs
            raise NotifierError(f"webhook {self.name}: {type(e).__name__}: {detail}") from e
        if not response.is_success:
            raise NotifierError(f"webhook {self.name}: HTTP {response.status_code} {response.text[:200]}")

    def close(self) -> None:
        self._client.close()


class EmailNotifier:
    """Sends render_email() through an SMTP server. `tls`: "none", "starttls" or "ssl" (SMTPS)."""

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        sender: str,
        recipients: Sequence[str],
        *,
        username: str | None = None,
        password: str | None = None,
        tls: str = "none",
        timeout_s: float = 10.0,
    ) -> None:
        if tls not in ("none", "starttls", "ssl"):
            raise ValueError(f"tls must be none, starttls or ssl, not {tls!r}")
        if not recipients:
            raise ValueError("at least one recipient")
        self.name = name
        self.host, self.port, self.sender, self.recipients = host, port, sender, list(recipients)
        self._username, self._password, self._tls, self._timeout_s = username, password, tls, timeout_s

    def send(self, changes: Sequence[AlertChange]) -> None:
        message = render_email(changes, self.sender, self.recipients)
        try:
            with self._connect() as smtp:
                if self._tls == "starttls":
                    smtp.starttls(context=ssl.create_default_context())
                if self._username:
                    smtp.login(self._username, self._password or "")
                smtp.send_message(message)
        except (OSError, smtplib.SMTPException) as e:
            raise NotifierError(f"e-mail {self.name} via {self.host}:{self.port}: {e}") from e

    def _connect(self) -> smtplib.SMTP:
        if self._tls == "ssl":
            return smtplib.SMTP_SSL(self.host, self.port, timeout=self._timeout_s, context=ssl.create_default_context())
        return smtplib.SMTP(self.host, self.port, timeout=self._timeout_s)


@dataclass(frozen=True, slots=True)
class DeliveryStatus:
    """What operators see about one notifier: failures are visible, never silent."""

    notifier: str
    delivered: int
    failed: int  # notifications given up on after every attempt
    dropped: int  # notifications refused because the queue was full
    retries: int
    last_error: str | None
    last_error_at: float | None
    last_success_at: float | None


def compute_backoff_s(attempt: int, base_s: float, max_s: float) -> float:
    """Delay before retry `attempt` (1-based): base, 2*base, 4*base ... capped at max_s."""
    return float(min(base_s * 2.0 ** (attempt - 1), max_s))


class _Worker:
    """One notifier's queue and thread, so a slow endpoint delays only itself."""

    def __init__(self, notifier: Notifier, queue_size: int) -> None:
        self.notifier = notifier
        self.queue: queue.Queue[Sequence[AlertChange] | None] = queue.Queue(maxsize=queue_size)
        self.thread: threading.Thread | None = None
        self.delivered = self.failed = self.dropped = self.retries = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.last_success_at: float | None = None


class NotificationDispatcher:
    """Delivers notifications to every notifier in the background.

    submit() never blocks: it keeps the changes with notify=True and queues them per notifier (a full
    queue drops and counts). Each delivery is tried `attempts` times with exponential backoff; `sleep`
    waits between tries (default: an interruptible wait that stop() cuts short).
    """

    def __init__(
        self,
        notifiers: Sequence[Notifier],
        *,
        attempts: int = 5,
        base_backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        queue_size: int = 1000,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        self._workers = [_Worker(n, queue_size) for n in notifiers]
        self._attempts, self._base_s, self._max_s = max(attempts, 1), base_backoff_s, max_backoff_s
        self._clock = clock
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._lock = threading.Lock()

    def submit(self, changes: Sequence[AlertChange]) -> None:
        wanted = [c for c in changes if c.notify]
        if not wanted:
            return
        for w in self._workers:
            try:
                w.queue.put_nowait(wanted)
            except queue.Full:
                with self._lock:
                    w.dropped += 1

    def deliver(self, notifier_index: int, changes: Sequence[AlertChange]) -> bool:
        """Deliver to one notifier now, with retries, on the calling thread. True when it got through."""
        w = self._workers[notifier_index]
        for attempt in range(1, self._attempts + 1):
            try:
                w.notifier.send(changes)
            except NotifierError as e:
                with self._lock:
                    w.last_error, w.last_error_at = str(e), self._clock()
                log.warning("alert notification failed (attempt %d/%d): %s", attempt, self._attempts, e)
                if attempt == self._attempts or self._stop.is_set():
                    break
                with self._lock:
                    w.retries += 1
                self._sleep(compute_backoff_s(attempt, self._base_s, self._max_s))
            else:
                with self._lock:
                    w.delivered += 1
                    w.last_success_at = self._clock()
                return True
        with self._lock:
            w.failed += 1
        return False

    def start(self) -> None:
        self._stop.clear()
        for i, w in enumerate(self._workers):
            if w.thread is None:
                w.thread = threading.Thread(
                    target=self._run, args=(i,), name=f"corral-notify-{w.notifier.name}", daemon=True
                )
                w.thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the threads; queued notifications not yet sent are abandoned."""
        self._stop.set()
        for w in self._workers:
            if w.thread is not None:
                try:
                    w.queue.put_nowait(None)
                except queue.Full:
                    pass  # the thread sees the stop flag after its current delivery
                w.thread.join(timeout_s)
                w.thread = None

    def status(self) -> list[DeliveryStatus]:
        with self._lock:
            return [
                DeliveryStatus(
                    w.notifier.name,
                    w.delivered,
                    w.failed,
                    w.dropped,
                    w.retries,
                    w.last_error,
                    w.last_error_at,
                    w.last_success_at,
                )
                for w in self._workers
            ]

    def _run(self, index: int) -> None:
        w = self._workers[index]
        while not self._stop.is_set():
            changes = w.queue.get()
            if changes is None:
                return
            self.deliver(index, changes)
