"""The `corral` command's entry point. `corral --version` and the everyday job commands (submit, jobs, show,
logs, cancel, wait) take the light path (corral.cli.light: no typer, httpx, pydantic or rich, so a call costs
tens of milliseconds); everything else loads the typer app (corral.cli.app).

Every failure the user can cause ends in one line `error: ...` on stderr and a non-zero exit.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing's: the CLI's light path does not import typing (a few ms per call)
if TYPE_CHECKING:
    from typing import Any

LIGHT_COMMANDS = frozenset({"submit", "jobs", "show", "logs", "cancel", "wait"})


def main(argv: list[str] | None = None) -> Any:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--version"], ["version"]):
        from corral import __version__

        print(__version__)
        return None
    if args and args[0] in LIGHT_COMMANDS:
        from corral.cli import light

        light.run(args[0], args[1:])
    from corral.cli import app

    return app.main(args)


if __name__ == "__main__":
    main()
