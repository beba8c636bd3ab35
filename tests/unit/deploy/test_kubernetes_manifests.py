"""deploy/kubernetes/ (`kubectl apply -k deploy/kubernetes`): every manifest the kustomization lists is valid
against the Kubernetes schemas (strict: an unknown or misspelt field is an error), and agrees with Corral and
with itself where a user relies on it: the CORRAL_* variables are real settings and build valid settings, the
agent's arguments parse with the real `corral agent`, the probes' paths answer on the port they name, Services
select pods that serve their ports, every Secret, PVC and ServiceAccount referenced is there, the agents land on
GPU nodes and reach the server under a name its certificate carries. Offline: no cluster, no kubectl."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import typer
import yaml
from fastapi.testclient import TestClient

from corral import __version__
from corral.agent.main import AgentSettings
from corral.cli.app import app as cli_app
from corral.server.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy" / "kubernetes"
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
SETTINGS_DOC = (ROOT / "docs" / "settings.md").read_text()
NAMESPACE = "corral"
# Kubernetes 1.30 is the oldest release these manifests are for; the newest the validator bundles is checked too.
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")
# Variables of Corral's containers that are not Corral settings, and why they are there.
OTHER_ENV = {
    "server": {"PGPASSWORD"},  # libpq's password for CORRAL_DATABASE_URL (and pg_dump), kept out of the URL
    "agent": {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"},  # the NVIDIA container toolkit's
}
# What the downward API gives at run time, for building settings here.
FIELD_REFS = {"spec.nodeName": "gpu-node-7", "status.hostIP": "10.0.0.7", "status.podIP": "10.0.0.7"}


# ---- rendering: the kustomization's resources, each file's documents ----


def load_kustomization() -> dict[str, Any]:
    k = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert isinstance(k, dict)
    return k


def render() -> list[tuple[str, dict[str, Any]]]:
    """(file, document) for every document of every resource the kustomization lists, in its order."""
    docs = []
    for name in load_kustomization().get("resources", []):
        if not (DEPLOY / name).is_file():
            continue  # test_kustomization_lists_every_manifest_and_nothing_else names it
        for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
            if doc is not None:
                docs.append((name, doc))
    return docs


DOCS = render()


def label(item: tuple[str, dict[str, Any]]) -> str:
    return f"{item[0]}:{item[1].get('kind')}/{item[1].get('metadata', {}).get('name')}"


def objects(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in DOCS if d["kind"] == kind]


def one(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in objects(kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} in deploy/kubernetes (want 1)"
    return found[0]


def pod_specs() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, its pod spec) for every workload."""
    for kind in WORKLOADS:
        for w in objects(kind):
            yield w, w["spec"]["template"]["spec"]


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def corral_container(component: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(workload, pod spec, container) of the Corral container whose pods are labelled with `component`."""
    found = [
        (w, spec, c)
        for w, spec in pod_specs()
        if w["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == component
        for c in containers(spec)
        if c["image"].split(":")[0] == "corral"
    ]
    assert len(found) == 1, f"one Corral container labelled component={component}, found {len(found)}"
    return found[0]


def test_kustomization_lists_every_manifest_and_nothing_else() -> None:
    k = load_kustomization()
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and k["kind"] == "Kustomization"
    # This test renders the resource list as it is; a transformer (namespace, labels, patches, generators) would
    # make `kubectl apply -k` apply something else than what is checked here. Overlays are the place for those.
    assert set(k) <= {"apiVersion", "kind", "resources"}, (
        f"unrendered kustomization fields: {set(k) - {'apiVersion', 'kind', 'resources'}}"
    )
    listed = k["resources"]
    assert len(listed) == len(set(listed)), "a resource is listed twice"
    for name in listed:
        assert (DEPLOY / name).is_file(), f"kustomization.yaml lists {name}, which is not in deploy/kubernetes"
    on_disk = {p.name for p in DEPLOY.iterdir() if p.suffix in (".yaml", ".yml")} - {"kustomization.yaml"}
    assert on_disk == set(listed), f"manifests not in kustomization.yaml: {sorted(on_disk - set(listed))}"
    assert DOCS, "no documents rendered"
    for name in listed:
        assert any(f == name for f, _ in DOCS), f"{name} holds no document"


def test_names_are_unique_and_everything_is_in_the_namespace() -> None:
    seen: set[tuple[str, str]] = set()
    for item in DOCS:
        doc = item[1]
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in seen, f"{label(item)} is defined twice"
        seen.add(key)
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{label(item)} is not in namespace {NAMESPACE}"
    one("Namespace", NAMESPACE)


# ---- the Kubernetes schemas ----


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("item", DOCS, ids=label)
def test_manifest_is_valid_kubernetes(item: tuple[str, dict[str, Any]], version: str) -> None:
    kubernetes_validate.validate(item[1], version, strict=True)


@pytest.mark.parametrize(
    "mutate, where",
    [
        # a misspelt field: strict mode refuses what Kubernetes would drop (or, server-side, refuse)
        (lambda c: c.__setitem__("imagePulPolicy", "IfNotPresent"), "imagePulPolicy"),
        (lambda c: c["ports"][0].__setitem__("containerPort", "8600"), "containerPort"),  # a wrong type
        (lambda c: c.pop("name"), "name"),  # a required field missing
    ],
    ids=["misspelt-field", "wrong-type", "missing-required"],
)
def test_validator_catches_a_broken_manifest(mutate: Any, where: str) -> None:
    """The validation above can fail: a copy of the server Deployment with one mistake is refused."""
    broken = copy.deepcopy(one("Deployment", "corral-server"))
    mutate(broken["spec"]["template"]["spec"]["containers"][0])
    with pytest.raises(kubernetes_validate.ValidationError) as e:
        kubernetes_validate.validate(broken, K8S_VERSIONS[0], strict=True)
    assert where in str(e.value)


# ---- images ----


def test_images_are_pinned_and_corral_is_this_version() -> None:
    for w, spec in pod_specs():
        for c in containers(spec):
            image = c["image"]
            name, _, tag = image.rpartition(":") if "@" not in image else (image, "", "digest")
            assert name and tag and "/" not in tag, f"{w['metadata']['name']}/{c['name']}: {image} has no tag"
            assert tag != "latest", f"{w['metadata']['name']}/{c['name']}: {image} is `latest`"
            if name == "corral":  # built from deploy/docker/Dockerfile, tagged with the package's version
                assert tag == __version__, f"{image}: the Corral image is tagged corral:{__version__} (README)"


def test_the_dockerfile_runs_the_corral_cli() -> None:
    """The manifests give Corral's containers `args` only (`server`, `agent ...`): the image's entrypoint is the
    `corral` command, and the build line the README and the Dockerfile give makes the tag the manifests use."""
    text = DOCKERFILE.read_text()
    entrypoint = re.search(r"^ENTRYPOINT\s+(\[.*\])\s*$", text, re.M)
    assert entrypoint is not None
    assert yaml.safe_load(entrypoint.group(1))[-1] == "corral"
    build = f"docker build -f deploy/docker/Dockerfile -t corral:{__version__} ."
    assert build in text and build in (DEPLOY / "README.md").read_text()
    for _, spec in pod_specs():
        for c in containers(spec):
            if c["image"].startswith("corral:"):
                assert "command" not in c, f"{c['name']}: `command` would bypass the image's entrypoint"


# ---- Corral's settings and CLI ----


def cli_variables() -> set[str]:
    """The CLI's variables, from docs/settings.md's CLI table."""
    cli = SETTINGS_DOC.split("\n## CLI", 1)[1]
    return set(re.findall(r"^\| `(CORRAL_[A-Z0-9_]+)`", cli, re.M))


def env_values(doc: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the pod would see it: values, Secret keys, downward API fields."""
    out: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            out[e["name"]] = str(e["value"])
        elif "secretKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["secretKeyRef"]
            out[e["name"]] = secret_data(ref["name"])[ref["key"]]
        elif "fieldRef" in e.get("valueFrom", {}):
            out[e["name"]] = FIELD_REFS[e["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            raise AssertionError(f"{doc['metadata']['name']}: env {e['name']}: a source this test does not know")
    assert not container.get("envFrom"), "envFrom would hide which variables a container gets"
    return out


def secret_data(name: str) -> dict[str, str]:
    s = one("Secret", name)
    return {**s.get("data", {}), **s.get("stringData", {})}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No CORRAL_* variable of this machine leaks into the settings built from a manifest."""
    for key in list(os.environ):
        if key.startswith("CORRAL_"):
            monkeypatch.delenv(key)
    return monkeypatch


def server_settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    w, _, c = corral_container("server")
    for k, v in env_values(w, c).items():
        monkeypatch.setenv(k, v)
    assert c["args"] == ["server"], "the server runs `corral server`"
    params = parse_cli(c["args"])
    return Settings(**{k: v for k, v in params.items() if v is not None})


def parse_cli(args: list[str]) -> dict[str, Any]:
    """`corral ARGS` parsed by the real CLI (click, under typer): unknown flags and bad values raise."""
    group = typer.main.get_command(cli_app)
    commands = group.commands  # type: ignore[attr-defined]
    assert args and args[0] in commands, f"`corral {args[0] if args else ''}` is not a command"
    with commands[args[0]].make_context(args[0], list(args[1:])) as ctx:
        return dict(ctx.params)


@pytest.mark.parametrize("component", ["server", "agent"])
def test_corral_variables_are_real_settings(component: str) -> None:
    fields = (Settings if component == "server" else AgentSettings).model_fields
    known = {f"CORRAL_{f.upper()}" for f in fields} | (cli_variables() if component == "server" else set())
    _, _, c = corral_container(component)
    names = [e["name"] for e in c.get("env", [])]
    assert len(names) == len(set(names)), f"{component}: a variable is set twice"
    for name in names:
        if name.startswith("CORRAL_"):
            assert name in known, f"{component}: {name} is not a Corral setting of `corral {component}`"
            assert f"`{name}`" in SETTINGS_DOC, f"{name} is not in docs/settings.md"
        else:
            assert name in OTHER_ENV[component], f"{component}: {name} is neither a Corral setting nor expected"


def test_pods_get_no_service_link_variables() -> None:
    """Kubernetes adds NAME_PORT=tcp://... for every Service to every pod unless told not to: a Service named
    `corral` would set CORRAL_PORT and break the server's settings."""
    for w, spec in pod_specs():
        assert spec.get("enableServiceLinks") is False, f"{w['metadata']['name']}: enableServiceLinks: false"


def test_server_settings_build_and_match_the_manifests(clean_env: pytest.MonkeyPatch) -> None:
    s = server_settings(clean_env)
    _, spec, c = corral_container("server")
    ports = {p["containerPort"] for p in c["ports"]}
    for what, port in [
        ("CORRAL_PORT", s.port),
        ("CORRAL_JOB_UI_PORT", s.effective_job_ui_port),
        ("CORRAL_AGENT_PORT", s.effective_agent_port),
        ("CORRAL_GATEWAY_PORT", s.effective_gateway_port),
    ]:
        assert port in ports, f"the server listens on {port} ({what}), which the container does not declare"
    assert s.host == "0.0.0.0" and s.serves_https
    # the data dir lives on the PVC, in a directory below the mount the server can make 0700
    mount = mount_of(spec, c, PurePosixPath(str(s.data_dir)))
    assert volume_kind(spec, mount["name"]) == "persistentVolumeClaim"
    assert PurePosixPath(str(s.data_dir)) != PurePosixPath(mount["mountPath"])
    # the CLI in the pod verifies the server with the CA the server keeps in its data dir
    env = env_values({"metadata": {"name": "corral-server"}}, c)
    assert env["CORRAL_CA_FILE"] == f"{s.data_dir}/ca/ca.crt"
    assert urlparse(env["CORRAL_URL"]).port == s.port and env["CORRAL_URL"].startswith("https://")


def test_server_database_is_the_postgres_service(clean_env: pytest.MonkeyPatch) -> None:
    s = server_settings(clean_env)
    url = urlparse(s.effective_database_url.replace("postgresql+psycopg://", "postgresql://"))
    assert url.scheme == "postgresql" and url.password is None, "the password comes from PGPASSWORD, not the URL"
    pg_workload, pg_container = service_backend(url.hostname or "", url.port or 5432)
    pg_env = {e["name"]: e for e in pg_container["env"]}
    assert pg_env["POSTGRES_USER"]["value"] == url.username
    assert pg_env["POSTGRES_DB"]["value"] == url.path.lstrip("/")
    _, _, c = corral_container("server")
    server_env = {e["name"]: e for e in c["env"]}
    assert server_env["PGPASSWORD"]["valueFrom"] == pg_env["POSTGRES_PASSWORD"]["valueFrom"], "one password"
    assert pg_workload["kind"] == "StatefulSet" and pg_workload["spec"]["volumeClaimTemplates"]


def test_agent_arguments_parse_with_the_real_cli_and_build_settings(clean_env: pytest.MonkeyPatch) -> None:
    w, spec, c = corral_container("agent")
    params = parse_cli(c["args"])  # raises on a flag `corral agent` does not have
    assert c["args"][0] == "agent"
    assert params["token"] is None and params["server_url"] is None, "only --join and --token-file join"
    for k, v in env_values(w, c).items():
        clean_env.setenv(k, v)
    flags = {
        "server_url": params["join_url"],
        "join_token_file": params["token_file"],
        "gpus": params["gpus"],
        "node_name": params["node_name"],
        "data_dir": params["data_dir"],
    }  # as `corral agent` builds them (src/corral/cli/run.py)
    a = AgentSettings(**{k: v for k, v in flags.items() if v is not None})
    assert a.gpus == "nvml", "real GPUs only: `auto` would register simulated GPUs where NVML fails"
    assert a.node_name == FIELD_REFS["spec.nodeName"], "the node name is the Kubernetes node's (downward API)"
    assert a.effective_address == FIELD_REFS["status.hostIP"] and spec.get("hostNetwork") is True
    assert volume_kind(spec, mount_of(spec, c, PurePosixPath(str(a.data_dir)))["name"]) == "hostPath", (
        "the node's certificate must outlive the pod, or every restart would spend a join token"
    )
    assert a.jobs_dir is not None
    jobs = PurePosixPath(str(a.jobs_dir))
    assert not jobs.is_relative_to(str(a.data_dir)), "jobs' dirs lie outside the 0700 data dir"
    assert volume_kind(spec, mount_of(spec, c, jobs)["name"]) == "hostPath", "checkpoints outlive the pod"
    assert a.docker_host == "none"


def test_agent_token_file_is_the_join_secret() -> None:
    _, spec, c = corral_container("agent")
    token_file = PurePosixPath(parse_cli(c["args"])["token_file"])
    mount = mount_of(spec, c, token_file)
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert "secret" in volume and mount.get("readOnly") is True
    key = str(token_file.relative_to(mount["mountPath"]))
    items = {i["path"]: i["key"] for i in volume["secret"].get("items", [])} or None
    key = items[key] if items else key
    assert key in secret_data(volume["secret"]["secretName"]), f"the Secret has no key {key}"
    assert volume["secret"].get("defaultMode", 0o644) & 0o077 == 0, "the token file is the agent's only"


def test_agent_reaches_the_server_under_a_name_its_certificate_carries(clean_env: pytest.MonkeyPatch) -> None:
    from corral.server.runtime import server_names

    s = server_settings(clean_env)
    _, _, c = corral_container("agent")
    for url in parse_cli(c["args"])["join_url"].split(","):
        u = urlparse(url)
        assert u.scheme == "https" and u.hostname
        assert u.hostname in server_names(s), f"{u.hostname} is not in CORRAL_TLS_NAMES: the agent's TLS check fails"
        _, server_container = service_backend(u.hostname, u.port or 443)
        assert server_container["image"].startswith("corral:") and s.effective_agent_port in {
            p["containerPort"] for p in server_container["ports"]
        }
        target = service_target(u.hostname, u.port or 443)
        assert container_port(server_container, target) == s.effective_agent_port, (
            "the Service's port is not the agents'"
        )


# ---- probes: real routes on the port they name ----


@pytest.fixture(scope="module")
def server_apps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from corral.server.app import create_agent_app, create_app

    with pytest.MonkeyPatch.context() as mp:
        for key in list(os.environ):
            if key.startswith("CORRAL_"):
                mp.delenv(key)
        app = create_app(Settings(data_dir=tmp_path_factory.mktemp("corral-data")))
    return {"api": app, "agents": create_agent_app(app)}


def http_probes() -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for w, spec in pod_specs():
        for c in containers(spec):
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = c.get(kind)
                if probe and "httpGet" in probe:
                    out.append(
                        (f"{w['metadata']['name']}/{c['name']}/{kind}", c["image"], {**probe["httpGet"], "c": c})
                    )
    return out


def test_corral_server_has_http_probes() -> None:
    kinds = {name.rsplit("/", 1)[1] for name, image, _ in http_probes() if image.startswith("corral:")}
    assert {"readinessProbe", "livenessProbe"} <= kinds


@pytest.mark.parametrize("probe", http_probes(), ids=lambda p: p[0])
def test_probe_path_answers_without_a_token(
    probe: tuple[str, str, dict[str, Any]], server_apps: dict[str, Any], clean_env: pytest.MonkeyPatch
) -> None:
    name, image, get = probe
    assert image.startswith("corral:"), f"{name}: an HTTP probe this test does not know how to check"
    s = server_settings(clean_env)
    port = container_port(get["c"], get["port"])
    apps = {s.port: ("api", s.serves_https), s.effective_agent_port: ("agents", True)}
    assert port in apps, f"{name}: port {port} is not the API's ({s.port}) nor the agents' port"
    which, https = apps[port]
    assert get.get("scheme", "HTTP") == ("HTTPS" if https else "HTTP"), (
        f"{name}: the port serves {'HTTPS' if https else 'HTTP'}"
    )
    r = TestClient(server_apps[which]).get(get["path"])
    assert r.status_code == 200, f"{name}: GET {get['path']} on the {which} port answers {r.status_code}"


# ---- Services, selectors, references ----


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def selected_pods(selector: dict[str, str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(w, spec) for w, spec in pod_specs() if matches(selector, w["spec"]["template"]["metadata"]["labels"])]


def container_port(c: dict[str, Any], port: int | str) -> int:
    for p in c.get("ports", []):
        if port in (p.get("name"), p["containerPort"]):
            return int(p["containerPort"])
    raise AssertionError(f"container {c['name']} has no port {port}")


def service_of(host: str) -> dict[str, Any]:
    """The Service a cluster DNS name (NAME[.NAMESPACE[.svc[.cluster.local]]]) names."""
    parts = host.split(".")
    assert len(parts) <= 2 or parts[2] == "svc", f"{host} is not a Service's cluster name"
    if len(parts) > 1:
        assert parts[1] == NAMESPACE, f"{host}: not in namespace {NAMESPACE}"
    return one("Service", parts[0])


def service_target(host: str, port: int) -> int | str:
    ports = [p for p in service_of(host)["spec"]["ports"] if p["port"] == port]
    assert ports, f"Service {host} has no port {port}"
    return ports[0].get("targetPort", port)  # type: ignore[no-any-return]


def service_backend(host: str, port: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(workload, container) behind Service `host` on `port`."""
    svc = service_of(host)
    target = service_target(host, port)
    for w, spec in selected_pods(svc["spec"]["selector"]):
        for c in spec["containers"]:
            if any(target in (p.get("name"), p["containerPort"]) for p in c.get("ports", [])):
                return w, c
    raise AssertionError(f"no pod of Service {host} serves port {target}")


@pytest.mark.parametrize("svc", objects("Service"), ids=lambda s: s["metadata"]["name"])
def test_service_selects_pods_that_serve_its_ports(svc: dict[str, Any]) -> None:
    selector = svc["spec"]["selector"]
    assert selector and selected_pods(selector), f"Service {svc['metadata']['name']} selects no pod"
    for p in svc["spec"]["ports"]:
        service_backend(svc["metadata"]["name"], p["port"])


def test_workloads_select_their_own_pods() -> None:
    for w, _ in pod_specs():
        selector = w["spec"]["selector"]["matchLabels"]
        assert matches(selector, w["spec"]["template"]["metadata"]["labels"])
        others = [o for o, _ in selected_pods(selector) if o is not w]
        assert not others, f"{w['metadata']['name']}'s selector also matches {[o['metadata']['name'] for o in others]}"
    for sts in objects("StatefulSet"):
        headless = one("Service", sts["spec"]["serviceName"])
        assert matches(headless["spec"]["selector"], sts["spec"]["template"]["metadata"]["labels"])


def test_network_policies_select_real_pods() -> None:
    for policy in objects("NetworkPolicy"):
        assert selected_pods(policy["spec"]["podSelector"]["matchLabels"]), "the policy protects no pod"
        for rule in policy["spec"].get("ingress", []):
            for peer in rule.get("from", []):
                assert selected_pods(peer["podSelector"]["matchLabels"]), "a peer that matches no pod"


def mount_of(spec: dict[str, Any], c: dict[str, Any], path: PurePosixPath) -> dict[str, Any]:
    """The volume mount `path` lies in (the deepest one)."""
    found = [m for m in c.get("volumeMounts", []) if path.is_relative_to(m["mountPath"])]
    assert found, f"{c['name']}: {path} is on no volume (it would be lost with the container)"
    return max(found, key=lambda m: len(m["mountPath"]))


def volume_kind(spec: dict[str, Any], name: str) -> str:
    for v in spec.get("volumes", []):
        if v["name"] == name:
            return next(k for k in v if k != "name")
    raise AssertionError(f"no volume {name}")


def test_every_reference_exists() -> None:
    """Secrets, ConfigMaps, PVCs, ServiceAccounts and volumes a pod names are in the manifests."""
    for w, spec in pod_specs():
        where = w["metadata"]["name"]
        one("ServiceAccount", spec["serviceAccountName"])
        templates = {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
        volumes = {v["name"] for v in spec.get("volumes", [])} | templates
        for v in spec.get("volumes", []):
            if "secret" in v:
                data = secret_data(v["secret"]["secretName"])
                for item in v["secret"].get("items", []):
                    assert item["key"] in data, f"{where}: Secret key {item['key']}"
            if "configMap" in v:
                one("ConfigMap", v["configMap"]["name"])
            if "persistentVolumeClaim" in v:
                one("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"])
        for c in containers(spec):
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes, f"{where}/{c['name']}: mounts volume {m['name']}, which is not there"
            for e in c.get("env", []):
                ref = e.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    key = ref["secretKeyRef"]
                    assert key["key"] in secret_data(key["name"]), f"{where}: Secret {key['name']} key {key['key']}"
                if "configMapKeyRef" in ref:
                    assert ref["configMapKeyRef"]["key"] in one("ConfigMap", ref["configMapKeyRef"]["name"])["data"]


def test_every_secret_is_made_by_a_documented_command() -> None:
    """The Secrets ship placeholders; the README says how to put real values in each file kustomize applies."""
    readme = (DEPLOY / "README.md").read_text()
    for s in objects("Secret"):
        name = s["metadata"]["name"]
        file = next(f for f, d in DOCS if d is s)
        assert f"create secret generic {name}" in readme, f"README: how to make Secret {name}"
        assert f"deploy/kubernetes/{file}" in readme, f"README: the command writes deploy/kubernetes/{file}"


# ---- the agent DaemonSet on GPU nodes ----


def test_agents_run_on_gpu_nodes_with_the_nvidia_runtime() -> None:
    ds, spec, c = corral_container("agent")
    assert ds["kind"] == "DaemonSet"
    assert spec["nodeSelector"].get("nvidia.com/gpu.present") == "true"
    assert any(
        t.get("key") == "nvidia.com/gpu"
        and (t.get("operator") == "Exists" or t.get("operator", "Equal") == "Equal" and "value" in t)
        and t.get("effect") in (None, "NoSchedule")
        for t in spec.get("tolerations", [])
    ), "the agent tolerates the nvidia.com/gpu taint"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and "utility" in env["NVIDIA_DRIVER_CAPABILITIES"]  # NVML
    assert spec.get("runtimeClassName") == "nvidia"
    # Corral schedules the node's GPUs itself; a request for nvidia.com/gpu would hand some to Kubernetes' scheduler
    assert "nvidia.com/gpu" not in str(c.get("resources", {}))
    # jobs run in this container: a limit would bound every job on the node
    assert "limits" not in c.get("resources", {}) and c["resources"]["requests"]
    assert ds["spec"]["updateStrategy"]["type"] == "OnDelete", "an update must not end running jobs by itself"


def test_agent_runs_as_root_with_only_the_capabilities_its_isolation_needs() -> None:
    _, spec, c = corral_container("agent")
    sc = c["securityContext"]
    assert sc["runAsUser"] == 0, "as root, every job runs as its user's own Unix identity"
    assert sc.get("privileged") is not True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert {"SETUID", "SETGID", "KILL"} <= set(sc["capabilities"]["add"])
    assert not {"SYS_ADMIN", "NET_ADMIN", "SYS_MODULE"} & set(sc["capabilities"]["add"])
    assert spec.get("hostPID") is not True


def test_server_and_database_run_unprivileged_with_limits() -> None:
    for component in ("server", "postgres"):
        found = [
            (w, spec)
            for w, spec in pod_specs()
            if w["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == component
        ]
        assert len(found) == 1
        w, spec = found[0]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec.get("automountServiceAccountToken") is False
        for c in spec["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
