"""Notifiers against real local servers (HTTP for webhooks, a small stdlib SMTP server for e-mail), and
the dispatcher's retries, backoff and visible failures."""

from __future__ import annotations

import email
import http.server
import json
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from corral.alerts.evaluator import AlertChange, AlertState, SeriesPoint, evaluate_rules
from corral.alerts.notifiers import (
    EmailNotifier,
    NotificationDispatcher,
    NotifierError,
    WebhookNotifier,
    compute_backoff_s,
    render_webhook_body,
)
from corral.alerts.rules import make_labels, parse_rule

RULE = parse_rule(
    {
        "name": "gpu_unhealthy",
        "metric": "gpu_unhealthy",
        "comparison": ">",
        "threshold": 0,
        "severity": "critical",
        "summary": "GPU {gpu} on {node} out: {reason}",
    }
)


def _changes() -> tuple[list[AlertChange], list[AlertChange]]:
    point = SeriesPoint("gpu_unhealthy", make_labels({"node": "n1", "gpu": "3", "reason": "xid"}), 1)
    firing = evaluate_rules([RULE], [point], {}, 100.0)
    resolved = evaluate_rules([RULE], [], firing.alerts, 160.0)
    return firing.changes, resolved.changes


def _poll(condition, deadline_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and not condition():
        time.sleep(0.005)
    return bool(condition())


class _Receiver(http.server.BaseHTTPRequestHandler):
    bodies: list[Any]
    statuses: list[int]

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status = self.statuses.pop(0) if self.statuses else 200
        if status == 200:
            self.bodies.append(body)
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"ok" if status == 200 else b"nope")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, type[_Receiver]]]:
    handler = type("Receiver", (_Receiver,), {"bodies": [], "statuses": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", handler
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_webhook_body_is_slack_compatible_with_structured_alerts() -> None:
    firing, resolved = _changes()
    body = render_webhook_body(firing)
    assert body["text"] == "[FIRING] critical gpu_unhealthy: GPU 3 on n1 out: xid"
    assert body["status"] == "firing"
    assert body["alerts"][0]["labels"] == {"gpu": "3", "node": "n1", "reason": "xid"}
    assert body["alerts"][0]["fired_at"] == 100.0
    assert render_webhook_body(resolved)["status"] == "resolved"
    json.dumps(body)


def test_webhook_delivers_firing_then_resolved(receiver: tuple[str, type[_Receiver]]) -> None:
    url, handler = receiver
    firing, resolved = _changes()
    hook = WebhookNotifier("ops", url)
    hook.send(firing)
    hook.send(resolved)
    assert [b["alerts"][0]["status"] for b in handler.bodies] == ["firing", "resolved"]
    assert handler.bodies[1]["alerts"][0]["resolved_at"] == 160.0


def test_webhook_error_status_and_unreachable_raise(receiver: tuple[str, type[_Receiver]]) -> None:
    url, handler = receiver
    handler.statuses.append(500)
    with pytest.raises(NotifierError, match="HTTP 500"):
        WebhookNotifier("ops", url).send(_changes()[0])
    with pytest.raises(NotifierError, match="ConnectError"):
        WebhookNotifier("ops", f"http://127.0.0.1:{_closed_port()}/").send(_changes()[0])


class _SmtpHandler(socketserver.StreamRequestHandler):
    """Just enough SMTP (RFC 5321) for smtplib: EHLO, MAIL, RCPT, DATA, QUIT."""

    messages: list[tuple[str, list[str], bytes]]

    def handle(self) -> None:
        self._reply("220 localhost test SMTP")
        sender, recipients = "", []
        while line := self.rfile.readline():
            verb = line.decode().strip().split(" ", 1)[0].split(":", 1)[0].upper()
            if verb in ("EHLO", "HELO"):
                self._reply("250 localhost")
            elif verb == "MAIL":
                sender = line.decode().split(":", 1)[1].strip().strip("<>")
                self._reply("250 OK")
            elif verb == "RCPT":
                recipients.append(line.decode().split(":", 1)[1].strip().strip("<>"))
                self._reply("250 OK")
            elif verb == "DATA":
                self._reply("354 end with <CRLF>.<CRLF>")
                data = b""
                while (chunk := self.rfile.readline()) not in (b".\r\n", b""):
                    data += chunk
                self.messages.append((sender, recipients, data))
                self._reply("250 queued")
            elif verb == "QUIT":
                self._reply("221 bye")
                return
            else:
                self._reply("250 OK")

    def _reply(self, text: str) -> None:
        self.wfile.write(text.encode() + b"\r\n")


@pytest.fixture
def smtp_server() -> Iterator[tuple[int, list[tuple[str, list[str], bytes]]]]:
    messages: list[tuple[str, list[str], bytes]] = []
    handler = type("Smtp", (_SmtpHandler,), {"messages": messages})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield int(server.server_address[1]), messages
    server.shutdown()
    server.server_close()


def test_email_goes_through_a_real_smtp_conversation(smtp_server: tuple[int, list[Any]]) -> None:
    port, messages = smtp_server
    firing, _ = _changes()
    EmailNotifier("oncall", "127.0.0.1", port, "corral@example.org", ["ops@example.org", "me@example.org"]).send(firing)
    [(sender, recipients, data)] = messages
    assert sender == "corral@example.org" and recipients == ["ops@example.org", "me@example.org"]
    message = email.message_from_bytes(data)
    assert message["Subject"] == "[Corral] 1 firing: gpu_unhealthy"
    payload = message.get_payload(decode=True)
    assert isinstance(payload, bytes)
    body = payload.decode()
    assert "[FIRING] critical gpu_unhealthy: GPU 3 on n1 out: xid" in body and "gpu=3" in body


def test_email_to_an_unreachable_server_raises() -> None:
    notifier = EmailNotifier("oncall", "127.0.0.1", _closed_port(), "a@b.c", ["d@e.f"], timeout_s=2)
    with pytest.raises(NotifierError, match="e-mail oncall"):
        notifier.send(_changes()[0])


class _Flaky:
    def __init__(self, failures: int) -> None:
        self.name, self.failures = "flaky", failures
        self.sent: list[Any] = []

    def send(self, changes: Any) -> None:
        if self.failures:
            self.failures -= 1
            raise NotifierError("endpoint down")
        self.sent.append(changes)


def test_retries_with_exponential_backoff_then_succeeds() -> None:
    flaky, slept = _Flaky(3), list[float]()
    dispatcher = NotificationDispatcher(
        [flaky], attempts=5, base_backoff_s=2, max_backoff_s=5, sleep=slept.append, clock=lambda: 77.0
    )
    assert dispatcher.deliver(0, _changes()[0])
    assert slept == [2, 4, 5] and len(flaky.sent) == 1
    [status] = dispatcher.status()
    assert (status.delivered, status.failed, status.retries, status.last_success_at) == (1, 0, 3, 77.0)
    assert status.last_error == "endpoint down"


def test_gives_up_after_all_attempts_and_the_failure_is_visible() -> None:
    flaky = _Flaky(10)
    dispatcher = NotificationDispatcher([flaky], attempts=3, sleep=lambda s: None, clock=lambda: 5.0)
    assert not dispatcher.deliver(0, _changes()[0])
    [status] = dispatcher.status()
    assert (status.delivered, status.failed, status.last_error, status.last_error_at) == (0, 1, "endpoint down", 5.0)


def test_backoff_doubles_and_caps() -> None:
    assert [compute_backoff_s(n, 1, 10) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_submit_never_blocks_and_delivers_in_background(receiver: tuple[str, type[_Receiver]]) -> None:
    url, handler = receiver
    dead = WebhookNotifier("dead", f"http://127.0.0.1:{_closed_port()}/")
    dispatcher = NotificationDispatcher([WebhookNotifier("ops", url), dead], attempts=2, base_backoff_s=0.01)
    dispatcher.start()
    try:
        firing, resolved = _changes()
        dispatcher.submit(firing)
        dispatcher.submit(resolved)
        assert _poll(lambda: len(handler.bodies) == 2)
        assert _poll(lambda: dispatcher.status()[1].failed == 2)
    finally:
        dispatcher.stop()
    assert [b["status"] for b in handler.bodies] == ["firing", "resolved"]
    ok, down = dispatcher.status()
    assert ok.delivered == 2 and down.delivered == 0 and "ConnectError" in (down.last_error or "")


def test_only_changes_marked_notify_are_sent_and_full_queue_drops() -> None:
    flaky = _Flaky(0)
    dispatcher = NotificationDispatcher([flaky], queue_size=1)
    firing, _ = _changes()
    pending_only = [AlertChange(firing[0].alert, None, notify=False)]
    dispatcher.submit(pending_only)
    dispatcher.submit(firing)
    dispatcher.submit(firing)  # not started: the queue of one is full
    assert dispatcher.status()[0].dropped == 1
    dispatcher.start()
    assert _poll(lambda: len(flaky.sent) == 1)
    dispatcher.stop()
    assert flaky.sent[0][0].alert.state is AlertState.FIRING
