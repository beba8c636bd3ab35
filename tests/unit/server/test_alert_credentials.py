"""Alert delivery credentials come from files, never from settings' values in the environment or the database."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.alerts.test_alert_notifiers import _changes

from corral.alerts.notifiers import EmailNotifier, WebhookNotifier
from corral.core.errors import ValidationError
from corral.server.services.alert_credentials import load_smtp_password, load_webhook_urls
from corral.server.services.alerting import build_notifiers
from corral.server.settings import Settings


def test_webhooks_and_the_smtp_password_are_read_from_files(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    hooks.write_text("# team chat\nhttps://hooks.example/T0/B0/tok3n  # ops\n\n")
    password = tmp_path / "smtp-password"
    password.write_text("s3cret pass\n")
    settings = Settings(
        data_dir=tmp_path,
        alert_webhooks="https://a.example/x",
        alert_webhooks_file=str(hooks),
        smtp_host="mail.example",
        alert_email_to="ops@example.org",
        smtp_username="corral",
        smtp_password_file=str(password),
        smtp_tls="starttls",
    )
    assert load_webhook_urls(settings) == ["https://a.example/x", "https://hooks.example/T0/B0/tok3n"]
    assert load_smtp_password(settings) == "s3cret pass"
    notifiers = build_notifiers(settings)
    assert [type(n) for n in notifiers] == [WebhookNotifier, WebhookNotifier, EmailNotifier]


@pytest.mark.parametrize(
    ("setting", "value", "field"),
    [
        pytest.param("smtp_password_file", "missing", "smtp_password_file", id="missing-password-file"),
        pytest.param("alert_webhooks_file", "missing", "alert_webhooks_file", id="missing-webhooks-file"),
        pytest.param("alert_webhooks", "ftp://tok3n@x", "alert_webhooks", id="not-http"),
    ],
)
def test_an_unusable_credential_stops_the_start_without_showing_it(
    tmp_path: Path, setting: str, value: str, field: str
) -> None:
    arg = str(tmp_path / value) if value == "missing" else value
    settings = Settings(data_dir=tmp_path, smtp_host="mail.example", alert_email_to="ops@example.org", **{setting: arg})
    with pytest.raises(ValidationError) as e:
        build_notifiers(settings)
    assert e.value.field == field and "tok3n" not in e.value.message


def test_a_failed_delivery_never_shows_the_webhooks_url() -> None:
    import httpx

    from corral.alerts.notifiers import NotifierError

    url = "https://hooks.example/services/T0/B0/tok3n"

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot connect to {request.url}", request=request)

    notifier = WebhookNotifier("webhook-1", url, transport=httpx.MockTransport(refuse))
    with pytest.raises(NotifierError) as e:
        notifier.send(_changes()[0])
    assert "tok3n" not in str(e.value) and "<url>" in str(e.value)
