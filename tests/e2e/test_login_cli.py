"""Login back-off and sessions through the real CLI and a real server: one's own new password takes the current
one, guessing a password ends in one `error: too many failed logins ...` line, and a password change by an admin
ends the CLI's saved login session."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Corral

pytestmark = pytest.mark.e2e


def test_guessing_backs_off_and_a_password_change_ends_the_cli_session(corral_factory: Any) -> None:
    c: Corral = corral_factory()
    c.env["CORRAL_LOGIN_FAILURES_ALLOWED"] = "2"
    c.start()
    r = c.cli("users", "create", "alice", "--password", env=dict(c.env, CORRAL_PASSWORD="alice-secret-1"))
    assert r.returncode == 0, r.stderr
    alice_home = c.root / "alice"
    alice = {k: v for k, v in c.env.items() if k != "CORRAL_PORT"}
    alice.update(HOME=str(alice_home), XDG_CONFIG_HOME=str(alice_home / ".config"), CORRAL_URL=c.url)

    assert c.cli("login", "alice", env=dict(alice, CORRAL_PASSWORD="alice-secret-1")).returncode == 0
    assert c.cli_json_as(alice, "whoami")["user"] == "alice"

    # Her own new password takes the current one (from CORRAL_CURRENT_PASSWORD here, else asked); the session
    # that changed it goes on.
    r = c.cli("users", "set", "alice", "--password", env=dict(alice, CORRAL_PASSWORD="alice-secret-2"))
    assert r.returncode != 0 and "current" in r.stderr  # no current password to give: refused, nothing changed
    r = c.cli(
        "users",
        "set",
        "alice",
        "--password",
        env=dict(alice, CORRAL_PASSWORD="alice-secret-2", CORRAL_CURRENT_PASSWORD="alice-secret-1"),
    )
    assert r.returncode == 0, r.stderr
    assert c.cli_json_as(alice, "whoami")["user"] == "alice"

    # Wrong passwords: 401s, then the name is locked (1 s, doubling per failure): within a few tries the CLI
    # says so in one line, whatever the machine's speed.
    answers = []
    for _ in range(8):
        r = c.cli("login", "alice", env=dict(alice, CORRAL_PASSWORD="a-wrong-guess"))
        assert r.returncode != 0
        answers.append(r.stderr.strip())
        if "too many failed logins" in answers[-1]:
            break
    assert answers[0].startswith("error: ") and answers[0].endswith("wrong user name or password")
    assert answers[-1].startswith("error: too many failed logins; try again in "), answers
    assert len(answers[-1].splitlines()) == 1

    # The saved session (from the first login) ends when an admin sets a new password.
    r = c.cli("users", "set", "alice", "--password", env=dict(c.env, CORRAL_PASSWORD="alice-secret-3"))
    assert r.returncode == 0, r.stderr
    r = c.cli("whoami", env=alice)
    assert r.returncode != 0 and r.stderr.startswith("error: "), r.stderr
