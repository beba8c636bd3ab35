"""Other users' latency under a flood of bad logins: p50/p99 of `GET /api/v1/jobs` for a normal user of a real
`corral server` while 8 client processes send wrong passwords as fast as the server answers.

Four runs, each against a fresh server:
- `idle`: no logins at all (the reference);
- `before`: the code before login back-off and the password pool (`--baseline-ref`, exported with `git archive`):
  argon2 ran in the request thread pool, as many at once as asked;
- `pool only`: argon2 on one low-priority worker of its own, 8 waiting at most (429 beyond), no back-off;
- `after`: the defaults: that pool, and the back-off (the attacking address is locked after 20 failures).

    .venv/bin/python bench/login_flood.py [--seconds 15] [--attackers 8] [--baseline-ref 0753279] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from benchlib import free_port

CORRAL = str(Path(sys.executable).with_name("corral"))
BASELINE = "baseline"  # the `before` run: old code, from --baseline-ref
RUNS: dict[str, dict[str, str] | None] = {
    "idle": None,
    "before": {BASELINE: "1"},
    "pool only": {"CORRAL_LOGIN_FAILURES_ALLOWED": "1000"},
    "after": {},
}


def export_baseline(ref: str) -> Path:
    """The source tree of `ref` (read from git, nothing in the checkout changes)."""
    out = Path(tempfile.mkdtemp(prefix="corral-baseline-"))
    repo = Path(__file__).resolve().parent.parent
    archive = subprocess.run(["git", "-C", str(repo), "archive", ref, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out / "src"


def attack(url: str, started: Any, stop: Any, out: Any) -> None:
    """One attacker: wrong passwords for a real user and made-up ones until `stop` is set; counts answers."""
    seen: Counter[int] = Counter()
    with httpx.Client(base_url=url, timeout=120) as c:
        started.put(os.getpid())
        i = 0
        while not stop.is_set():
            i += 1
            name = "alice" if i % 2 else f"guess{os.getpid()}-{i}"
            try:
                seen[c.post("/api/v1/login", json={"username": name, "password": f"wrong-{i}"}).status_code] += 1
            except httpx.HTTPError:
                seen[0] += 1
    out.put(dict(seen))


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start_server(root: Path, extra: dict[str, str], baseline_src: Path | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update(
        CORRAL_PORT=str(port),
        CORRAL_DATA_DIR=str(root / "data"),
        HOME=str(root),
        XDG_CONFIG_HOME=str(root / ".config"),
        **{k: v for k, v in extra.items() if k != BASELINE},
    )
    cmd = [CORRAL, "server"]
    if BASELINE in extra and baseline_src is not None:
        env["PYTHONPATH"] = str(baseline_src)
        cmd = [
            sys.executable,
            "-c",
            "import sys; from corral.cli.main import main; sys.argv[0] = 'corral'; main()",
            "server",
        ]
    server = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while not (root / "data" / "admin-token").exists() or not _up(url):
        if time.monotonic() > deadline or server.poll() is not None:
            sys.exit(f"server did not start ({' '.join(cmd)}, exit {server.poll()}, data dir {root})")
        time.sleep(0.1)
    return server, url


def seed(url: str, admin_token: str) -> str:
    """A user `alice` with a password and up to 50 pending jobs; returns her API token."""
    admin = {"Authorization": f"Bearer {admin_token}"}
    with httpx.Client(base_url=url, headers=admin, timeout=60) as c:
        c.post(
            "/api/v1/users", json={"name": "alice", "role": "member", "password": "correct horse"}
        ).raise_for_status()
        token = str(c.post("/api/v1/tokens", json={"user": "alice", "name": "bench"}).json()["token"])
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        for i in range(50):  # no agent: they stay pending (or are refused as never fitting: then the list is short)
            c.post("/api/v1/jobs", json={"command": ["true"], "name": f"j{i}", "gpus": 1})
    return token


def measure(url: str, token: str, seconds: float) -> list[float]:
    """Sequential `GET /api/v1/jobs` of alice for `seconds`; each request's latency in ms."""
    out = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        stop_at = time.monotonic() + seconds
        while time.monotonic() < stop_at:
            t0 = time.perf_counter()
            c.get("/api/v1/jobs").raise_for_status()
            out.append((time.perf_counter() - t0) * 1000)
    return out


def run(
    name: str, extra: dict[str, str] | None, seconds: float, attackers: int, baseline_src: Path | None
) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="corral-login-flood-"))
    server, url = start_server(root, extra or {}, baseline_src)
    try:
        token = seed(url, (root / "data" / "admin-token").read_text().strip())
        ctx = multiprocessing.get_context("spawn")
        results: Any = ctx.Queue()
        started: Any = ctx.Queue()
        stop = ctx.Event()
        procs = []
        if extra is not None:
            procs = [ctx.Process(target=attack, args=(url, started, stop, results)) for _ in range(attackers)]
            for p in procs:
                p.start()
            for _ in procs:  # every attacker is sending before the clock starts
                started.get(timeout=120)
            time.sleep(2)  # let the flood build up before measuring
        lat = sorted(measure(url, token, seconds))
        stop.set()
        answers: Counter[int] = Counter()
        for p in procs:
            answers.update(results.get(timeout=300))
            p.join()
        q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [lat[0]] * 99
        code = "baseline" if extra and BASELINE in extra else "this tree"
        return {
            "run": name,
            "code": code,
            "requests": len(lat),
            "p50_ms": round(statistics.median(lat), 1),
            "p99_ms": round(q[98], 1),
            "logins": sum(answers.values()),
            "logins_by_status": {str(k): v for k, v in sorted(answers.items())},
        }
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--attackers", type=int, default=8)
    ap.add_argument("--baseline-ref", default="0753279", help="git ref of the code before (the `before` run)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    baseline_src = export_baseline(args.baseline_ref)
    rows = [run(name, extra, args.seconds, args.attackers, baseline_src) for name, extra in RUNS.items()]
    if args.json:
        print(json.dumps({"attackers": args.attackers, "seconds": args.seconds, "runs": rows}, indent=2))
        return
    print(f"GET /api/v1/jobs of a normal user while {args.attackers} clients send bad logins ({args.seconds:g} s each)")
    print(f"{'run':<10} {'requests':>8} {'p50 ms':>8} {'p99 ms':>8} {'logins':>7}  answers to the logins")
    for r in rows:
        print(
            f"{r['run']:<10} {r['requests']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['logins']:>7}  "
            f"{r['logins_by_status']}"
        )


if __name__ == "__main__":
    main()
