"""The typer app of `corral`: server and agent runners, inventory, tenancy and the simulator. The everyday job
commands run on the light path (corral.cli.light) and are listed here for `corral --help` only.

Every failure the user can cause ends in one line `error: ...` on stderr and a non-zero exit.
"""

from __future__ import annotations

import sys
from typing import Any

import pydantic
import typer
from typer._click import exceptions as click_exc  # typer vendors click; its errors live here

from corral import __version__
from corral.cli import alerts, directory, light, nodes, run, schedules, tenancy
from corral.cli import backup as backup_cli
from corral.cli import identity as identity_cli
from corral.cli import pools as pools_cli
from corral.cli import secrets as secrets_cli
from corral.cli import services as services_cli
from corral.cli import status as status_cli
from corral.cli.config import ConfigError
from corral.cli.simulate import simulate_app
from corral.core.errors import CorralError
from corral.sdk.errors import CorralSDKError

app = typer.Typer(
    name="corral",
    help="Corral: one pool of GPUs, many users.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback(invoke_without_command=True)
def _top(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", help="Print Corral's version and exit (also `corral version`)."),
) -> None:
    """Corral: one pool of GPUs, many users."""
    if version:  # `corral --version` alone never gets here (corral.cli.main prints it without loading typer)
        print(__version__)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        print(ctx.get_help())
        raise typer.Exit(2)


app.command("up")(run.up)
app.command("server")(run.server)
app.command("agent")(run.agent)
app.command("backup")(backup_cli.backup)
app.command("restore")(backup_cli.restore)
_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}


def _light(name: str, summary: str) -> None:
    """List a light command in `corral --help`; run through here too, it hands its arguments to corral.cli.light."""

    def command(ctx: typer.Context) -> None:
        light.run(name, list(ctx.args))

    command.__doc__ = summary
    app.command(name, context_settings=_PASS_THROUGH, add_help_option=False)(command)


_light("submit", "Submit a job; prints its id. With --repeat, creates a schedule and prints its id and next run.")
_light("jobs", "List pending and running jobs (all with --all).")
_light("show", "Show one job.")
_light("logs", "Print a job's logs (stdout and stderr).")
_light("cancel", "Cancel a job (SIGTERM, then SIGKILL after a grace period).")
_light("wait", "Wait for a job to end; exits with the job's exit code.")
app.add_typer(nodes.nodes_app, name="nodes")
app.add_typer(nodes.gpus_app, name="gpus")
app.add_typer(nodes.sim_app, name="sim")
app.add_typer(alerts.alerts_app, name="alerts")
app.add_typer(schedules.schedules_app, name="schedules")
app.command("pools")(pools_cli.pools)
app.add_typer(pools_cli.pool_app, name="pool")
app.command("budgets")(pools_cli.budgets)
app.add_typer(pools_cli.budget_app, name="budget")
app.command("report")(pools_cli.report)
app.command("services")(services_cli.services)
app.add_typer(services_cli.service_app, name="service")
app.command("login")(tenancy.login)
app.command("whoami")(tenancy.whoami)
app.command("status")(status_cli.status)
app.add_typer(tenancy.tenants_app, name="tenants")
app.add_typer(tenancy.users_app, name="users")
app.add_typer(tenancy.tokens_app, name="tokens")
tenancy.tokens_app.add_typer(identity_cli.join_tokens_app, name="join")
nodes.nodes_app.command("revoke")(identity_cli.revoke_node)
app.add_typer(directory.directory_app, name="directory")
app.add_typer(secrets_cli.secrets_app, name="secrets")
app.add_typer(simulate_app, name="simulate")


def _load_optional_commands() -> None:
    """Commands that live in their own modules register themselves on import."""
    try:
        import corral.cli.simulate_jobs  # noqa: F401  (registers `corral simulate jobs`)
    except ImportError:
        pass


@app.command("version")
def version() -> None:
    """Print Corral's version."""
    print(__version__)


def describe_error(e: BaseException) -> str:
    """One line naming what is wrong (the light path's words for the SDK's and Corral's own errors)."""
    if isinstance(e, pydantic.ValidationError):
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        return f"{loc}: {msg}" if loc else msg
    if isinstance(e, click_exc.UsageError):
        return e.format_message().replace("\n", " ")
    return light.describe_error(e)


def main(argv: list[str] | None = None) -> Any:
    """The typer app's entry (corral.cli.main.main sends everything but the light commands here)."""
    _load_optional_commands()
    try:
        return app(args=argv, standalone_mode=False)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
    except click_exc.NoArgsIsHelpError as e:
        print(e.format_message() if hasattr(e, "format_message") else str(e), file=sys.stderr)
        sys.exit(2)
    except click_exc.UsageError as e:
        print(f"error: {describe_error(e)}", file=sys.stderr)
        sys.exit(2)
    except (CorralSDKError, ConfigError, CorralError, pydantic.ValidationError) as e:
        print(f"error: {describe_error(e)}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
