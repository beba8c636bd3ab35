"""Server ingest rate: 200 simulated 8-GPU agents send telemetry batches to a real `corral server`.

Each simulated agent joins like a real one (a join token, a CSR, its own certificate) and registers over mutual
TLS on the agent port, then batches (host + 8 GPU samples, as the agent's
collector makes them) are POSTed from a pool of client threads as fast as the server takes them.
Prints batches/s and samples/s stored (one sample = one value of one series).

    .venv/bin/python bench/ingest_rate.py [--agents 200] [--seconds 20] [--threads 8] [--database-url URL] [--json]

--database-url must name an empty database you can throw away (the server migrates it and fills it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from benchlib import free_port

from corral.agent.gpu.simulated import SimulatedGpuBackend
from corral.agent.identity import new_key_and_csr
from corral.agent.metrics import collect_host_sample
from corral.core.telemetry import TelemetryBatch, batch_to_dict
from corral.sdk.join import join_cluster, trust_ssl_context

CORRAL = str(Path(sys.executable).with_name("corral"))


def _join(certs: Path, agent_url: str, token: str, name: str) -> ssl.SSLContext:
    """Join as `name` (a CSR over a fresh key); an SSLContext presenting the node's certificate."""
    key_pem, csr = new_key_and_csr(name)
    reply = join_cluster(agent_url, token, name, csr)
    certs.mkdir(parents=True, exist_ok=True)
    (certs / f"{name}.key").write_bytes(key_pem)
    (certs / f"{name}.crt").write_text(reply.cert)
    ctx = trust_ssl_context(reply.ca)
    ctx.load_cert_chain(certs / f"{name}.crt", certs / f"{name}.key")
    return ctx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--database-url", default="")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="corral-ingest-"))
    port, agent_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update(
        CORRAL_PORT=str(port),
        CORRAL_AGENT_PORT=str(agent_port),
        CORRAL_JOB_UI_PORT="0",
        CORRAL_GATEWAY_PORT="0",
        CORRAL_DATA_DIR=str(root / "data"),
        HOME=str(root),
        XDG_CONFIG_HOME=str(root / ".config"),
        CORRAL_ALERT_INTERVAL_S="5",
    )
    if args.database_url:
        env["CORRAL_DATABASE_URL"] = args.database_url
    server = subprocess.Popen(
        [CORRAL, "server"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not (root / "data" / "admin-token").exists() or not _up(url):
            if time.monotonic() > deadline:
                sys.exit("server did not start")
            time.sleep(0.1)
        admin = {"Authorization": f"Bearer {(root / 'data' / 'admin-token').read_text().strip()}"}
        token = httpx.post(
            f"{url}/api/v1/join-tokens", json={"ttl_s": 3600, "uses": args.agents}, headers=admin
        ).json()["token"]
        agent_url = f"https://127.0.0.1:{agent_port}"
        backends = {}
        contexts = {}
        for i in range(args.agents):
            name = f"sim-{i:03d}"
            contexts[name] = _join(root / "certs", agent_url, token, name)
            b = SimulatedGpuBackend("sim:8xH100-80GB", name)
            b.set_load({g: 0.5 for g in range(4)})
            backends[name] = b
            gpus = [
                {"index": g.index, "uuid": g.uuid, "model": g.model, "memory_mib": g.memory_mib} for g in b.discover()
            ]
            with httpx.Client(base_url=agent_url, verify=contexts[name], timeout=60) as c:
                c.post(
                    "/api/v1/agents/register", json={"name": name, "backend": "simulated", "gpus": gpus}
                ).raise_for_status()
        names = sorted(backends)
        counts = {"batches": 0, "samples": 0, "errors": 0}
        lock = threading.Lock()
        stop_at = time.monotonic() + args.seconds

        def worker(k: int) -> None:
            mine = names[k :: args.threads]
            clients = {n: httpx.Client(base_url=agent_url, verify=contexts[n], timeout=60) for n in mine}
            i = 0
            while time.monotonic() < stop_at:
                name = mine[i % len(mine)]
                i += 1
                now = time.time()
                readout = backends[name].sample(now)
                batch = TelemetryBatch(
                    node=name,
                    ts=now,
                    host=collect_host_sample(now),
                    gpus=readout.samples,
                    events=readout.events,
                    gpu_count=len(readout.samples),
                )
                r = clients[name].post(f"/api/v1/agents/{name}/telemetry", json=batch_to_dict(batch))
                with lock:
                    if r.status_code == 200:
                        counts["batches"] += 1
                        counts["samples"] += r.json()["stored"]
                    else:
                        counts["errors"] += 1
            for c in clients.values():
                c.close()

        started = time.monotonic()
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
    finally:
        os.killpg(server.pid, signal.SIGINT)
        server.wait(30)
    result = {
        "agents": args.agents,
        "seconds": round(elapsed, 1),
        "database": args.database_url or "sqlite",
        "batches_per_s": round(counts["batches"] / elapsed, 1),
        "samples_per_s": round(counts["samples"] / elapsed, 1),
        "errors": counts["errors"],
        "samples_per_batch": round(counts["samples"] / max(counts["batches"], 1), 1),
        "agent_batches_per_s_at_5s_interval": args.agents / 5,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{args.agents} agents x 8 GPUs, {result['database']}: {result['batches_per_s']} batches/s, "
            f"{result['samples_per_s']} samples/s stored ({result['samples_per_batch']} per batch, "
            f"{result['errors']} errors); 200 agents at a 5 s interval send {args.agents / 5:g} batches/s"
        )


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
