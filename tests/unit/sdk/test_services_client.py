"""The SDK's services calls (issue 18) against a real server on loopback: a round trip through every endpoint, typed
with corral.api.services' models, and the server's refusals as CorralAPIError naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.api.services import ServiceIn, ServiceOut, ServicePatch, ServiceSampleOut
from corral.sdk.client import CorralAPIError, CorralClient
from corral.server.runtime import ServerThread
from corral.server.settings import Settings
from ports import free_port


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CorralClient]:
    data: Path = tmp_path_factory.mktemp("server") / "data"
    settings = Settings(
        data_dir=data, port=free_port(), job_ui_port=0, agent_port=free_port(), gateway_port=free_port(), tls="off"
    )
    srv = ServerThread(settings)
    srv.start()
    try:
        with CorralClient(settings.url, srv.credentials.admin_token) as c:
            yield c
    finally:
        srv.stop()


def test_a_round_trip_through_every_call(client: CorralClient) -> None:
    made = client.create_service(
        ServiceIn(name="api", command=["sh", "-c", "true"], port=8080, target_rps=5, min_replicas=1, max_replicas=3)
    )
    assert isinstance(made, ServiceOut) and made.url == "/services/api/" and made.autoscaled
    assert made.settings["max_replicas"] == 3 and made.revision == 1

    assert [s.name for s in client.services()] == ["api"]
    assert client.service("api").revisions[0].template["command"] == ["sh", "-c", "true"]

    # an explicit None is sent (autoscaling off); what was not set is not (the image stays as it was)
    updated = client.update_service("api", ServicePatch(target_rps=None, env={"MODE": "fast"}))
    assert not updated.autoscaled and updated.revision == 2 and updated.image is None
    assert updated.revisions[-1].template["env"] == {"MODE": "fast"}

    assert client.scale_service("api", 2).desired == 2
    assert client.rollback_service("api").revision == 1
    samples = client.service_metrics("api", since_s=60)
    assert all(isinstance(s, ServiceSampleOut) for s in samples)

    client.delete_service("api")
    assert client.service("api").deleting or not client.services()


def test_refusals_name_the_field(client: CorralClient) -> None:
    with pytest.raises(CorralAPIError) as e:
        client.create_service(ServiceIn.model_construct(name="Bad", command=["true"], port=80))
    assert e.value.status == 422 and e.value.field == "name"
    with pytest.raises(CorralAPIError) as e:
        client.service("missing")
    assert e.value.status == 404
    client.create_service(ServiceIn(name="fixed", command=["true"], port=80, target_rps=1, max_replicas=2))
    with pytest.raises(CorralAPIError) as e:
        client.scale_service("fixed", 3)  # autoscaled: the count is the autoscaler's
    assert e.value.status == 409 and e.value.field == "replicas"
    client.delete_service("fixed")
