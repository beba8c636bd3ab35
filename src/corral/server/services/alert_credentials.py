"""Credentials of alert delivery read from files, never from the environment or argv: webhook URLs that carry
tokens, the SMTP password. Nothing of them is stored in the database; a missing file stops the start."""

from __future__ import annotations

from pathlib import Path

from corral.core.errors import ValidationError
from corral.server.settings import Settings


def _read(setting: str, path: str) -> str:
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValidationError(setting, f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from e


def load_webhook_urls(settings: Settings) -> list[str]:
    """CORRAL_ALERT_WEBHOOKS (comma-separated) and the lines of CORRAL_ALERT_WEBHOOKS_FILE (`#` comments)."""
    urls = [u.strip() for u in settings.alert_webhooks.split(",") if u.strip()]
    if settings.alert_webhooks_file:
        text = _read("alert_webhooks_file", settings.alert_webhooks_file)
        urls += [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ValidationError(
                "alert_webhooks",
                "a webhook URL starts with http:// or https:// (one does not; it is not shown, it may hold a token)",
            )
    return urls


def load_smtp_password(settings: Settings) -> str | None:
    """The first line of CORRAL_SMTP_PASSWORD_FILE; None without one."""
    if not settings.smtp_password_file:
        return None
    lines = _read("smtp_password_file", settings.smtp_password_file).splitlines()
    return lines[0] if lines else ""
