"""Corral's NVML backend on this machine's real GPUs: what it discovers, what one sampling pass costs, and
whether a GPU under load shows its utilisation, memory and process as `nvidia-smi` does.

Needs only the standard library, nvidia-ml-py and Corral's `src/` (the agent's GPU code imports nothing else),
so it runs on a GPU machine without the rest of the virtual environment:

    PYTHONPATH=src:<dir with pynvml.py> python3 bench/nvml_probe.py [--samples 50] [--load 6] [--json]

Steps: (1) `load_gpu_backend("auto")` must pick NVML; (2) `discover()` (timed) lists model, memory, UUID, bus id,
NUMA node, NVLink peers, ECC, MIG profile; each is compared with `nvidia-smi --query-gpu` when that tool is
present; (3) `sample()` is timed over --samples passes (the agent samples every few seconds, so this is its
per-pass cost); (4) with --load S, a child process pins GPU 0 through CUDA_VISIBLE_DEVICES, allocates 2 GiB and
spins a PTX kernel for S seconds (CUDA driver API through ctypes: no CUDA toolkit needed); the samples taken
meanwhile must show utilisation > 0, the child's pid among GPU 0's processes and >= 2 GiB used; (5)
`wait_events(1)` must return without error (no fault expected). Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

# PTX for a kernel that spins `iters` times per thread; the driver JIT-compiles it for whatever GPU is there.
SPIN_PTX = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 iters)
{
  .reg .u64 %rd<4>;
  .reg .pred %p;
  ld.param.u64 %rd1, [iters];
  mov.u64 %rd2, 0;
LOOP:
  add.u64 %rd2, %rd2, 1;
  setp.lt.u64 %p, %rd2, %rd1;
  @%p bra LOOP;
  ret;
}
"""


def load_worker(seconds: float) -> None:
    """Child: hold 2 GiB on the first visible GPU and keep its SMs busy for `seconds`."""
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(rc: int, what: str) -> None:
        if rc != 0:
            sys.exit(f"load worker: {what} failed with CUDA error {rc}")

    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(2 << 30)), "cuMemAlloc 2 GiB")
    module = ctypes.c_void_p()
    check(cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(SPIN_PTX)), "cuModuleLoadData")
    func = ctypes.c_void_p()
    check(cuda.cuModuleGetFunction(ctypes.byref(func), module, b"spin"), "cuModuleGetFunction")
    iters = ctypes.c_uint64(20_000_000)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(iters), ctypes.c_void_p))
    print("ready", flush=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check(cuda.cuLaunchKernel(func, 1024, 1, 1, 256, 1, 1, 0, None, params, None), "cuLaunchKernel")
        check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    cuda.cuMemFree_v2(ptr)
    cuda.cuCtxDestroy_v2(ctx)


def smi_inventory() -> list[dict[str, str]] | None:
    """nvidia-smi's own view, to compare with Corral's; None when nvidia-smi is not installed."""
    if shutil.which("nvidia-smi") is None:
        return None
    fields = ["index", "uuid", "name", "memory.total", "pci.bus_id", "ecc.mode.current", "mig.mode.current"]
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [dict(zip(fields, (v.strip() for v in line.split(",")), strict=True)) for line in out.splitlines() if line]


def compare(gpus: list[Any], smi: list[dict[str, str]] | None) -> list[str]:
    """Differences between Corral's discovery and nvidia-smi's, in words; [] when they agree."""
    if smi is None:
        return []
    problems = []
    if len(smi) != len(gpus):
        problems.append(f"nvidia-smi sees {len(smi)} GPUs, Corral {len(gpus)}")
    for g, s in zip(gpus, smi, strict=False):
        if g.uuid != s["uuid"]:
            problems.append(f"GPU {g.index}: uuid {g.uuid} != nvidia-smi {s['uuid']}")
        if g.model != s["name"]:
            problems.append(f"GPU {g.index}: model {g.model!r} != nvidia-smi {s['name']!r}")
        if abs(g.memory_mib - int(s["memory.total"])) > 1:
            problems.append(f"GPU {g.index}: memory {g.memory_mib} MiB != nvidia-smi {s['memory.total']} MiB")
        if g.pci_bus_id.lower() not in s["pci.bus_id"].lower() and s["pci.bus_id"].lower()[4:] != g.pci_bus_id:
            problems.append(f"GPU {g.index}: bus id {g.pci_bus_id} != nvidia-smi {s['pci.bus_id']}")
        if (s["ecc.mode.current"] == "Enabled") != g.ecc_enabled:
            problems.append(f"GPU {g.index}: ecc {g.ecc_enabled} != nvidia-smi {s['ecc.mode.current']}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=50, help="sampling passes to time (default 50)")
    ap.add_argument("--load", type=float, default=0.0, help="seconds of GPU 0 load to watch (0: none)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--load-worker", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.load_worker:
        load_worker(args.load_worker)
        return 0
    if args.samples < 1:
        ap.error("--samples must be at least 1")

    from corral.agent.gpu import load_gpu_backend

    report: dict[str, Any] = {"python": sys.version.split()[0], "checks": {}}
    failures: list[str] = []
    backend = load_gpu_backend("auto", "probe")
    report["backend"] = backend.name
    if backend.name != "nvml":
        failures.append(f"gpus=auto chose {backend.name}, not nvml")
    t0 = time.perf_counter()
    gpus = backend.discover()
    report["discover_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    report["gpus"] = [dataclasses.asdict(g) for g in gpus]
    smi = smi_inventory()
    report["nvidia_smi"] = smi
    mismatches = compare(gpus, smi)
    report["checks"]["matches_nvidia_smi"] = not mismatches
    failures += mismatches
    if not gpus:
        failures.append("NVML backend discovered no GPUs")

    times = []
    last = None
    for _ in range(args.samples):
        t0 = time.perf_counter()
        last = backend.sample(time.time())
        times.append((time.perf_counter() - t0) * 1000)
    report["sample_ms"] = {"median": round(statistics.median(times), 3), "max": round(max(times), 3)}
    report["idle_sample"] = [dataclasses.asdict(s) for s in last.samples] if last else []
    if last and any(s.pcie_tx_kib_s is None for s in last.samples):
        failures.append("no PCIe rate after several sampling passes")
    if last and last.events:
        failures.append(f"idle sampling raised fault events: {last.events}")

    if args.load > 0 and gpus:
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpus[0].uuid)
        child = subprocess.Popen(
            [sys.executable, __file__, "--load-worker", str(args.load)], env=env, stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        ready = child.stdout.readline().strip() == "ready"
        seen: list[dict[str, Any]] = []
        while ready and child.poll() is None:
            time.sleep(1.0)
            readout = backend.sample(time.time())
            s0 = next((s for s in readout.samples if s.index == gpus[0].index), None)
            if s0 is not None:
                seen.append(
                    {
                        "utilization_percent": s0.utilization_percent,
                        "memory_used_mib": s0.memory_used_mib,
                        "power_w": s0.power_w,
                        "temperature_c": s0.temperature_c,
                        "sm_clock_mhz": s0.sm_clock_mhz,
                        "pcie_tx_kib_s": s0.pcie_tx_kib_s,
                        "pcie_rx_kib_s": s0.pcie_rx_kib_s,
                        "pids": [p.pid for p in s0.processes],
                    }
                )
        child.wait()
        report["under_load"] = {"child_pid": child.pid, "exit": child.returncode, "samples": seen}
        busy = max((s["utilization_percent"] or 0) for s in seen) if seen else 0
        held = max((s["memory_used_mib"] or 0) for s in seen) if seen else 0
        pid_seen = any(child.pid in s["pids"] for s in seen)
        report["checks"].update(
            {"load_utilization_seen": busy > 0, "load_memory_seen": held >= 2048, "load_pid_seen": pid_seen}
        )
        if not ready or child.returncode != 0:
            failures.append(f"load worker did not run (exit {child.returncode})")
        if busy <= 0:
            failures.append("no utilisation seen on GPU 0 under load")
        if held < 2048:
            failures.append(f"GPU 0 memory used under load {held} MiB < 2048")
        if not pid_seen:
            failures.append(f"the load process {child.pid} was not among GPU 0's processes (containers hide pids)")

    t0 = time.perf_counter()
    events = backend.wait_events(1.0)
    report["wait_events"] = {"returned_after_s": round(time.perf_counter() - t0, 2), "events": len(events)}
    backend.close()
    report["failures"] = failures
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(f"backend {report['backend']}, python {report['python']}, discover {report['discover_ms']} ms")
        for g in gpus:
            print(
                f"  GPU {g.index} {g.model} {g.memory_mib} MiB {g.uuid} bus {g.pci_bus_id} numa {g.numa_node}"
                f" nvlink {list(g.nvlink_peers)} ecc {g.ecc_enabled} mig {g.mig_profile or '-'}"
            )
        print(f"sample pass: median {report['sample_ms']['median']} ms, max {report['sample_ms']['max']} ms")
        for s in report.get("under_load", {}).get("samples", []):
            print(f"  load: {s}")
        print("OK" if not failures else "FAILED:\n  " + "\n  ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
