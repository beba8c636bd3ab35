"""schemathesis over the whole OpenAPI, in-process (ASGI) against a real app with a temporary SQLite store and an
admin token: no request may end in a server error, and every status code and body must be the documented ones.

Bounded and repeatable: a fixed number of examples per operation, derandomized (the same cases every run). No agent
runs, so no submitted command is ever executed. `CORRAL_FUZZ_EXAMPLES` raises the count for a deeper local run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from corral.server.app import create_app
from corral.server.bootstrap import ensure_credentials
from corral.server.settings import Settings
from corral.store.sql import open_store

EXAMPLES = int(os.environ.get("CORRAL_FUZZ_EXAMPLES", "10"))
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance, content_type_conformance]
# Operations that are not JSON APIs: the portal's pages, the job proxy (a byte pipe to a job's own server) and the
# OpenAPI document itself.
SKIP_PATHS = "^/(proxy|ui|static|docs|redoc|openapi.json)|^/$"


@pytest.fixture(scope="module")
def fuzz_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data_dir: Path = tmp_path_factory.mktemp("fuzz")
    url = f"sqlite:///{data_dir / 'corral.db'}"
    store = open_store(url)
    creds = ensure_credentials(store, data_dir)
    settings = Settings(
        data_dir=data_dir, database_url=url, schedule_interval_s=5.0, alert_interval_s=60.0, job_ui_port=0
    )
    app = create_app(settings, store)
    yield {"app": app, "headers": {"Authorization": f"Bearer {creds.admin_token}"}}


def _fuzz_operation(operation: Any, mode: GenerationMode, headers: dict[str, str]) -> str | None:
    """Run the examples of one operation; the first failure as text, or None."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)

    try:
        run()
    except Unsatisfiable:
        return None  # nothing to send in this mode (a negative case of an operation without parameters)
    except (Exception, BaseExceptionGroup) as e:  # a check failed: report it with the others
        return f"{mode.value} {operation.label}: {str(e).strip()[:1500]}"
    return None


@pytest.mark.slow
@pytest.mark.timeout(900)  # ~45 s of CPU; the wall time stretches when the machine is shared
def test_no_server_errors_and_only_documented_answers(fuzz_env: dict[str, Any]) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_env["app"]).exclude(path_regex=SKIP_PATHS)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 50  # the whole API, not an empty schema
    failures = [
        problem
        for op in operations
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if (problem := _fuzz_operation(op, mode, fuzz_env["headers"])) is not None
    ]
    assert not failures, f"{len(failures)} operation(s) failed:\n\n" + "\n\n".join(failures)
