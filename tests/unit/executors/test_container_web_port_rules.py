"""A container job's web UI (pure parts): the node port Corral assigned is published to the port inside (the
image's, else the same number), PORT inside is that inner port, the engine's inspect is read only for this run's
running container, and only the engine's own forwarder of this container may hold the node port."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.agent.webports import compute_container_port_verdict, find_forwarder_pids, is_engine_forwarder
from corral.core.containers import ContainerSpec, container_from_dict, container_to_dict
from corral.core.errors import ValidationError
from corral.executors.base import LaunchSpec, PublishedPort
from corral.executors.container_config import compute_create_kwargs, compute_published

CID = "b3f2baaf676c01bec8e9b864be7336923681621594355e2baeb805108d99b01e"
PUBLISHED = PublishedPort(host_port=20001, container_port=8000, container_id=CID, container_ips=("172.17.0.2",))


def _kwargs(port: int | None, web_port: int | None, bind_host: str = "") -> dict[str, Any]:
    spec = LaunchSpec(
        job_id="7.1",
        command=("sh",),
        env={"CORRAL_JOB_PORT": str(web_port), "PORT": str(web_port)} if web_port else {},
        workdir=None,
        gpu_indices=(),
        gpu_uuids=(),
        log_path=Path("/tmp/x.log"),
        web_port=web_port,
    )
    container = ContainerSpec(image="corral-test/busybox:1", port=port)
    return compute_create_kwargs(
        spec, container, node="n", user="1000:1000", nvidia=False, cpu_milli=0, memory_mib=0, bind_host=bind_host
    )


@pytest.mark.parametrize(
    ("name", "port", "web_port", "bind_host", "ports", "port_inside"),
    [
        ("the image's port", 8000, 20001, "", {"8000/tcp": 20001}, "8000"),
        ("no port of its own: the node port inside too", None, 20001, "", {"20001/tcp": 20001}, "20001"),
        ("a bind address", 8000, 20001, "10.0.0.5", {"8000/tcp": ("10.0.0.5", 20001)}, "8000"),
        ("no web UI: nothing published", None, None, "", None, None),
    ],
)
def test_the_web_port_is_published_and_port_inside_is_the_inner_one(
    name: str, port: int | None, web_port: int | None, bind_host: str, ports: Any, port_inside: str | None
) -> None:
    kwargs = _kwargs(port, web_port, bind_host)
    assert kwargs.get("ports") == ports, name
    env = kwargs["environment"]
    assert (env.get("PORT"), env.get("CORRAL_JOB_PORT")) == (port_inside, port_inside), name
    assert kwargs["network_mode"] == "bridge"  # never the host's network, web UI or not


def test_the_container_port_survives_the_stored_and_wire_shape() -> None:
    spec = ContainerSpec(image="corral-test/busybox:1", port=8000)
    assert container_from_dict(container_to_dict(spec)) == spec
    assert "port" not in container_to_dict(ContainerSpec(image="corral-test/busybox:1"))  # older jobs' shape
    with pytest.raises(ValidationError) as e:
        container_from_dict({"image": "corral-test/busybox:1", "port": 70000})
    assert e.value.field == "container_port"


def _inspect(**over: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "Id": CID,
        "Config": {"Labels": {"io.corral.run": "7.1"}},
        "State": {"Running": True, "Paused": False, "Pid": 4242},
        "NetworkSettings": {
            "IPAddress": "172.17.0.2",
            "Ports": {"8000/tcp": [{"HostIp": "0.0.0.0", "HostPort": "20001"}, {"HostIp": "::", "HostPort": "20001"}]},
            "Networks": {"bridge": {"IPAddress": "172.17.0.2", "GlobalIPv6Address": ""}},
        },
    }
    attrs.update(over)
    return attrs


@pytest.mark.parametrize(
    ("name", "attrs", "expected"),
    [
        ("running, published", _inspect(), PublishedPort(20001, 8000, CID, ("172.17.0.2",), 4242)),
        ("another run's container", _inspect(Config={"Labels": {"io.corral.run": "8.1"}}), None),
        ("not running", _inspect(State={"Running": False, "Pid": 0}), None),
        ("paused", _inspect(State={"Running": True, "Paused": True, "Pid": 4242}), None),
        ("nothing published", _inspect(NetworkSettings={"IPAddress": "172.17.0.2", "Ports": {}}), None),
        (
            "two node ports (not Corral's shape)",
            _inspect(
                NetworkSettings={
                    "Ports": {"8000/tcp": [{"HostPort": "20001"}], "9000/tcp": [{"HostPort": "20002"}]},
                }
            ),
            None,
        ),
        (
            "Podman's shape",
            _inspect(
                NetworkSettings={
                    "IPAddress": "10.88.0.3",
                    "Ports": {"8000/tcp": [{"HostIp": "", "HostPort": "20001"}]},
                    "Networks": {"podman": {"IPAddress": "10.88.0.3"}},
                }
            ),
            PublishedPort(20001, 8000, CID, ("10.88.0.3",), 4242),
        ),
    ],
)
def test_what_the_engine_publishes_for_this_run(name: str, attrs: dict[str, Any], expected: Any) -> None:
    assert compute_published(attrs, "7.1") == expected, name


PROXY = "/usr/sbin/docker-proxy -proto tcp -host-ip 0.0.0.0 -host-port 20001 -container-ip 172.17.0.2 " + (
    "-container-port 8000"
)


@pytest.mark.parametrize(
    ("name", "comm", "args", "parent", "accepted"),
    [
        ("Docker's proxy of this container", "docker-proxy", PROXY, "dockerd", True),
        ("not dockerd's child", "docker-proxy", PROXY, "sh", False),
        ("another node port", "docker-proxy", PROXY.replace("20001", "20002"), "dockerd", False),
        ("another container's address", "docker-proxy", PROXY.replace("172.17.0.2", "172.17.0.9"), "dockerd", False),
        ("another port inside", "docker-proxy", PROXY.replace("8000", "8001"), "dockerd", False),
        ("Podman's conmon of this container", "conmon", f"/usr/bin/conmon --api-version 1 -c {CID} -u {CID}", "", True),
        ("conmon of another container", "conmon", f"/usr/bin/conmon -c {'0' * 64} -u {CID}", "", False),
        ("a job's python", "python3", PROXY, "dockerd", False),
    ],
)
def test_only_the_engines_own_forwarder_of_this_container_counts(
    name: str, comm: str, args: str, parent: str, accepted: bool
) -> None:
    assert is_engine_forwarder(comm, args.split(), parent, 20001, PUBLISHED) is accepted, name


def _fake_proc(root: Path, pid: int, comm: str, ppid: int, uid: int, cmdline: str) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0\n")
    (d / "status").write_text(f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")


def test_a_tenants_process_posing_as_docker_proxy_is_not_the_engines(tmp_path: Path) -> None:
    """A job may name its process docker-proxy and copy its command line, but never runs as root, and a root
    docker-proxy that is not a root dockerd's child is not one either."""
    from corral.agent.webports import load_process_table

    _fake_proc(tmp_path, 10, "dockerd", 1, 0, "/usr/sbin/dockerd")
    _fake_proc(tmp_path, 11, "docker-proxy", 10, 0, PROXY)  # the real one
    _fake_proc(tmp_path, 12, "docker-proxy", 10, 1000, PROXY)  # not root
    _fake_proc(tmp_path, 20, "dockerd", 1, 1000, "dockerd")  # a job's "dockerd"
    _fake_proc(tmp_path, 21, "docker-proxy", 20, 0, PROXY)  # root, but its parent is not
    names: dict[int, str] = {}
    table = load_process_table(str(tmp_path), names)
    assert names[11] == "docker-proxy"
    assert find_forwarder_pids(20001, PUBLISHED, table, names, str(tmp_path)) == {11}


@pytest.mark.parametrize(
    ("name", "inside", "listeners", "forwarders", "verdict"),
    [
        ("the engine's proxy only", True, {1, 2}, {1, 2}, (True, "")),
        ("NAT only, no listener on the node", True, set(), set(), (True, "")),
        ("inside not known", None, {1}, {1}, (True, "")),
        ("nothing inside", False, {1}, {1}, (False, "nothing listens on port 8000 inside the job's container")),
        ("another listener", True, {1, 3}, {1}, (False, "port 20001 is held by a process that is not the job's "
                                                         "container engine's")),
    ],
)  # fmt: skip
def test_the_container_port_verdict(
    name: str, inside: bool | None, listeners: set[int], forwarders: set[int], verdict: tuple[bool, str]
) -> None:
    assert compute_container_port_verdict(20001, PUBLISHED, inside, listeners, forwarders) == verdict, name
    assert not compute_container_port_verdict(20002, PUBLISHED, inside, listeners, forwarders)[0]
