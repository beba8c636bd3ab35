"""Settings that contradict each other, refused at start with one line saying why (instead of nodes that flap, a
port bound twice or rollups that outlive nothing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corral.server.settings import Settings


def required_node_lost_after_s(long_poll_s: float) -> float:
    """A node's heartbeat is its sync: one arrives at least every long poll, plus the reply's round trip."""
    return long_poll_s + max(2.0, long_poll_s / 2)


def find_contradiction(s: Settings) -> str | None:
    """The first contradiction among `s`, as one line naming the settings, or None."""
    required = required_node_lost_after_s(s.long_poll_s)
    if s.node_lost_after_s < required:
        return (
            f"CORRAL_NODE_LOST_AFTER_S={s.node_lost_after_s:g} must be at least {required:g}: agents heartbeat "
            f"once per long poll (CORRAL_LONG_POLL_S={s.long_poll_s:g}), so nodes would flap LOST and their jobs "
            "run again; raise it or lower CORRAL_LONG_POLL_S"
        )
    ports = {
        "CORRAL_PORT": s.port,
        "CORRAL_JOB_UI_PORT": s.effective_job_ui_port,
        "CORRAL_AGENT_PORT": s.effective_agent_port,
        "CORRAL_GATEWAY_PORT": s.effective_gateway_port,
    }
    taken: dict[int, str] = {}
    for name, port in ports.items():
        if port and port in taken:
            return f"{name} and {taken[port]} are both {port}: each needs a port of its own"
        taken.setdefault(port, name)
    from corral.core.webports import parse_port_range

    job_ports = parse_port_range(s.job_ports)
    for name, port in ports.items():
        if port in job_ports:
            return (
                f"{name}={port} lies in CORRAL_JOB_PORTS={s.job_ports}: a job's web UI could be handed the "
                "server's own port; move one of them"
            )
    if s.metrics_rollup_retention_s < s.metrics_raw_retention_s:
        return (
            f"CORRAL_METRICS_ROLLUP_RETENTION_S={s.metrics_rollup_retention_s:g} is shorter than "
            f"CORRAL_METRICS_RAW_RETENTION_S={s.metrics_raw_retention_s:g}: rollups must outlive the raw samples"
        )
    if s.alert_email_to and not s.smtp_host:
        return "CORRAL_ALERT_EMAIL_TO is set but CORRAL_SMTP_HOST is empty: alert e-mail could never be sent"
    if s.workers > 1 and s.effective_database_url.startswith("sqlite"):
        return (
            f"CORRAL_WORKERS={s.workers} needs PostgreSQL (CORRAL_DATABASE_URL): one SQLite file is one server's, "
            "and each worker would lead; use CORRAL_WORKERS=1 or a PostgreSQL database"
        )
    if bool(s.tls_cert) != bool(s.tls_key):
        return "CORRAL_TLS_CERT and CORRAL_TLS_KEY go together: set both or neither"
    return None
