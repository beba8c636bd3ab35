"""A whole Corral on a machine's real GPUs: `corral up` finds them through NVML, a job asking for one GPU gets it
(CUDA_VISIBLE_DEVICES names that GPU's UUID), loads it, and the server's telemetry shows the load on that GPU.

Prints what it saw and the figures: submit -> RUNNING and submit -> the job's first line (a real GPU node), and
the utilisation and memory the server's telemetry showed on the job's GPU while it ran. Exits 1 when a check
fails (no NVML node, the job got no GPU or not that one, no load seen, the job did not succeed).

    .venv/bin/python bench/real_gpu_job.py [--seconds 12] [--json]

On a GPU machine without the virtual environment: install the pinned wheels into any venv and run it with
PYTHONPATH=src (it then starts the server as `python -c 'from corral.cli.main import main; main()' up`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from benchlib import start_corral_up, stop_corral

HERE = Path(__file__).resolve().parent


def corral_command() -> list[str]:
    script = Path(sys.executable).with_name("corral")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from corral.cli.main import main; sys.exit(main())"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=12.0, help="how long the job loads its GPU (default 12)")
    ap.add_argument("--gpus", default="auto", help="CORRAL_GPUS for the server's local agent (default auto)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="corral-gpu-"))
    root.chmod(0o711)  # the job may run as its own Unix user: it reaches the load script by name
    load = root / "load.py"
    shutil.copy(HERE / "nvml_probe.py", load)  # its --load-worker needs only the standard library and libcuda
    load.chmod(0o644)
    proc, url, token = start_corral_up(corral_command(), root, {"CORRAL_GPUS": args.gpus}, root / "server.log")
    report: dict[str, Any] = {"failures": []}
    failures: list[str] = report["failures"]
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as c:
            while not (nodes := c.get("/api/v1/nodes").json()):
                time.sleep(0.2)
            node = nodes[0]
            report["node"] = {k: node[k] for k in ("name", "backend", "gpus_total", "gpu_models", "isolation")}
            if node["backend"] != "nvml":
                failures.append(f"the local agent uses {node['backend']}, not nvml")
            gpus = {g["index"]: g for g in c.get("/api/v1/gpus").json()}
            command = ["sh", "-c", 'echo "visible=$CUDA_VISIBLE_DEVICES"; exec python3 "$0" --load-worker "$1"']
            body = {"command": [*command, str(load), str(args.seconds)], "gpus": 1, "name": "real-gpu-load"}
            t0 = time.time()
            job = c.post("/api/v1/jobs", json=body).json()
            running_at = first_line_at = None
            util: list[float] = []
            mem: list[float] = []
            while True:
                j = c.get(f"/api/v1/jobs/{job['id']}").json()
                now = time.time()
                if running_at is None and j["state"] != "PENDING":
                    running_at = now
                if first_line_at is None and c.get(f"/api/v1/jobs/{job['id']}/logs").content:
                    first_line_at = now
                if j["state"] == "RUNNING" and j["gpus"]:
                    latest = c.get("/api/v1/metrics/latest", params={"node": j["node"]}).json()
                    for g in latest["gpus"]:
                        if g["index"] == j["gpus"][0]:
                            util.append(g["util_pct"] or 0.0)
                            mem.append(g["mem_used_mib"] or 0.0)
                if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                    break
                if now - t0 > args.seconds + 90:
                    failures.append(f"job {job['id']} still {j['state']} after {now - t0:.0f} s")
                    break
                time.sleep(0.5)
            logs = c.get(f"/api/v1/jobs/{job['id']}/logs").text
            visible = next((ln.split("=", 1)[1] for ln in logs.splitlines() if ln.startswith("visible=")), "")
            gpu = gpus.get(j["gpus"][0]) if j["gpus"] else None
            report["job"] = {
                "id": job["id"],
                "state": j["state"],
                "exit_code": j["exit_code"],
                "gpus": j["gpus"],
                "cuda_visible_devices": visible,
                "gpu_uuid": gpu["uuid"] if gpu else None,
            }
            report["submit_to_running_s"] = round((running_at or now) - t0, 3)
            report["submit_to_first_log_s"] = None if first_line_at is None else round(first_line_at - t0, 3)
            report["gpu_util_pct_max"] = max(util, default=0.0)
            report["gpu_mem_used_mib_max"] = max(mem, default=0.0)
            if j["state"] != "SUCCEEDED":
                failures.append(f"job ended {j['state']} (exit {j['exit_code']}): {logs[-500:]}")
            if gpu is None or visible not in (gpu["uuid"], str(gpu["index"])):
                failures.append(f"CUDA_VISIBLE_DEVICES={visible!r} does not name the job's GPU {gpu}")
            if node["backend"] == "nvml" and report["gpu_util_pct_max"] <= 0:
                failures.append("the server's telemetry showed no utilisation on the job's GPU")
    finally:
        stop_corral(proc)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for k, v in report.items():
            print(f"{k}: {v}")
        print("OK" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
