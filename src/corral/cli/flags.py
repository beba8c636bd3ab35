"""A refusal of a body field, by this CLI's own check of the API's schema or by the server, re-worded with the flag
the user typed (the commands built on typer: services, pools, budgets, reports)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import pydantic

from corral.cli import light
from corral.core.errors import ValidationError

M = TypeVar("M", bound=pydantic.BaseModel)


@contextmanager
def named_by_flags(flags: Mapping[str, str]) -> Iterator[None]:
    """The server's refusal of a field (`flags`: field -> flag), re-worded with the flag that set it."""
    try:
        yield
    except Exception as e:
        raise light._flag_error(e, flags=dict(flags)) from None


def validated(model: type[M], data: dict[str, Any], flags: Mapping[str, str]) -> M:
    """`data` as the API's body, checked here first: a refusal names the flag, as the server's would."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        loc = [str(x) for x in err["loc"]]
        flag = flags.get(loc[0], loc[0]) if loc else "body"
        where = f" ({'.'.join(loc[1:])})" if len(loc) > 1 else ""
        raise ValidationError(flag, str(err["msg"]).removeprefix("Value error, ") + where) from None
