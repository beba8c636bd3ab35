"""NvmlGpuBackend.sample() and wait_events() over FakeNvml: every metric, unsupported values, lost GPUs,
Xid / ECC event delivery."""

from __future__ import annotations

from collections.abc import Callable

import pynvml
import pytest

from corral.agent.gpu import GpuBackendError, NvmlGpuBackend
from corral.agent.gpu.fake_nvml import FakeNvml
from corral.core.telemetry import GpuEventKind, GpuProcess


def _backend(fake: FakeNvml) -> NvmlGpuBackend:
    return NvmlGpuBackend(fake, clock=lambda: 777.0)


def test_sample_reads_every_metric_of_a_busy_gpu() -> None:
    fake = FakeNvml.dgx(8)
    fake.busy(2, util=93, temperature_c=74, power_mw=655_500)
    fake.gpus[2].ecc_counts = (5, 1)
    fake.gpus[2].remapped_rows = (3, 1, 1, 0)
    fake.gpus[2].nvlink_kib = (1000, 2000)
    fake.gpus[2].throttle_reasons = 0x4 | 0x40
    s = _backend(fake).sample(123.0).samples[2]
    assert (s.ts, s.index, s.uuid) == (123.0, 2, fake.gpus[2].uuid)
    assert (s.utilization_percent, s.memory_utilization_percent) == (93.0, 46.0)
    assert s.memory_used_mib == 81559 * 3 // 4 and s.memory_total_mib == 81559
    assert s.memory_free_mib == 81559 - 81559 * 3 // 4
    assert s.power_w == pytest.approx(655.5)
    assert (s.temperature_c, s.sm_clock_mhz, s.memory_clock_mhz) == (74.0, 1980, 2619)
    assert s.throttle_reason_names == ("sw_power_cap", "hw_thermal_slowdown")
    assert (s.ecc_sbe_total, s.ecc_dbe_total) == (5, 1)
    assert (s.remapped_rows_correctable, s.remapped_rows_uncorrectable, s.remap_pending) == (3, 1, True)
    assert (s.pcie_tx_kib_s, s.pcie_rx_kib_s) == (None, None)  # a rate needs two passes of the counters
    assert (s.nvlink_tx_kib, s.nvlink_rx_kib) == (1000, 2000)
    assert s.processes == (GpuProcess(4244, 81559 * 3 // 4),)


def test_pcie_rate_comes_from_the_byte_counters_between_passes_not_the_slow_call() -> None:
    fake = FakeNvml.dgx(2)
    fake.busy(1)  # the slow call would answer 300,000 / 600,000 KiB/s: it must not be used
    backend = _backend(fake)
    fake.gpus[1].pcie_bytes = (10 << 20, 20 << 20)
    backend.sample(100.0)
    fake.gpus[1].pcie_bytes = ((10 << 20) + 4 * 1024 * 1000, (20 << 20) + 2 * 1024 * 1000)
    s = backend.sample(104.0).samples[1]
    assert (s.pcie_tx_kib_s, s.pcie_rx_kib_s) == (1000.0, 500.0)
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0
    fake.gpus[1].pcie_bytes = (5, 5)  # counters went backwards (driver reloaded): start over, no bogus rate
    s = backend.sample(106.0).samples[1]
    assert (s.pcie_tx_kib_s, s.pcie_rx_kib_s) == (None, None)
    fake.gpus[1].pcie_bytes = (5 + 2048 * 1024 * 2, 5)
    assert backend.sample(108.0).samples[1].pcie_tx_kib_s == 2048.0


def test_pcie_rate_falls_back_to_the_throughput_call_without_counters() -> None:
    fake = FakeNvml.dgx(2)
    fake.busy(1)
    fake.gpus[1].pcie_bytes = None  # an older driver
    s = _backend(fake).sample(1.0).samples[1]
    assert (s.pcie_tx_kib_s, s.pcie_rx_kib_s) == (300_000.0, 600_000.0)


def test_idle_gpu_has_no_processes_and_idle_throttle() -> None:
    s = _backend(FakeNvml.dgx(2)).sample(1.0).samples[0]
    assert s.processes == () and s.utilization_percent == 0.0
    assert s.throttle_reason_names == ("gpu_idle",)


def test_unsupported_values_are_none_and_other_gpus_unaffected() -> None:
    fake = FakeNvml.pcie_box(2)  # no ECC, no NVLink
    fake.gpus[0].power_mw = None
    fake.gpus[0].remapped_rows = None
    fake.fail(0, "nvmlDeviceGetComputeRunningProcesses", pynvml.NVML_ERROR_NOT_SUPPORTED)
    readout = _backend(fake).sample(1.0)
    s = readout.samples[0]
    assert s.power_w is None and s.ecc_dbe_total is None and s.ecc_sbe_total is None
    assert s.remapped_rows_uncorrectable is None and s.nvlink_rx_kib is None and s.retired_pages is None
    assert s.temperature_c == 31.0 and s.utilization_percent == 0.0
    assert readout.samples[1].power_w == 70.0
    assert readout.events == ()


def test_retired_pages_on_pre_ampere_gpus_sum_both_causes() -> None:
    fake = FakeNvml.dgx(2, "Tesla V100-SXM2-32GB")
    fake.gpus[1].retired_pages = (2, 1)
    fake.gpus[1].remapped_rows = None
    samples = _backend(fake).sample(1.0).samples
    assert samples[1].retired_pages == 3 and samples[1].remapped_rows_uncorrectable is None


@pytest.mark.parametrize(
    ("name", "break_gpu", "kind"),
    [
        ("lost on every call", lambda f: f.lose(1), GpuEventKind.OFF_BUS),
        (
            "lost only on one metric",
            lambda f: f.fail(1, "nvmlDeviceGetTemperature", pynvml.NVML_ERROR_GPU_IS_LOST),
            GpuEventKind.OFF_BUS,
        ),
        (
            "uuid unreadable",
            lambda f: f.fail(1, "nvmlDeviceGetUUID", pynvml.NVML_ERROR_UNKNOWN),
            GpuEventKind.NVML_ERROR,
        ),
    ],
)
def test_unreadable_gpu_gives_an_event_not_a_sample(
    name: str, break_gpu: Callable[[FakeNvml], None], kind: GpuEventKind
) -> None:
    fake = FakeNvml.dgx(4)
    break_gpu(fake)
    readout = _backend(fake).sample(9.0)
    assert [s.index for s in readout.samples] == [0, 2, 3], name
    assert [(e.kind, e.gpu_index, e.ts) for e in readout.events] == [(kind, 1, 9.0)], name


def test_sample_raises_backend_error_when_nvml_is_unusable() -> None:
    with pytest.raises(GpuBackendError):
        _backend(FakeNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)).sample(1.0)


def test_events_xid_and_double_bit_ecc_delivered_once_in_order() -> None:
    fake = FakeNvml.dgx(8)
    backend = _backend(fake)
    assert backend.wait_events(0) == []  # registers the event set
    fake.emit_xid(3, 79)
    fake.emit_ecc_dbe(6)
    fake.emit_xid(0, 13)
    events = backend.wait_events(0)
    assert [(e.kind, e.gpu_index, e.xid) for e in events] == [
        (GpuEventKind.XID, 3, 79),
        (GpuEventKind.ECC_DBE, 6, None),
        (GpuEventKind.XID, 0, 13),
    ]
    assert all(e.ts == 777.0 for e in events)
    assert backend.wait_events(0) == []
    assert backend.sample(1.0).samples[6].ecc_dbe_total == 1


def test_gpus_without_event_support_are_skipped() -> None:
    fake = FakeNvml.pcie_box(2)
    fake.gpus[0].event_types = 0
    backend = _backend(fake)
    backend.wait_events(0)
    fake.emit_xid(0, 79)  # not registered: NVML would not deliver it
    fake.emit_xid(1, 48)
    assert [(e.gpu_index, e.xid) for e in backend.wait_events(0)] == [(1, 48)]


def test_gpu_lost_while_watching_is_reported_and_watching_continues() -> None:
    fake = FakeNvml.dgx(4)
    backend = _backend(fake)
    backend.wait_events(0)
    fake.lose(2)
    events = backend.wait_events(0)
    assert [(e.kind, e.gpu_index) for e in events] == [(GpuEventKind.OFF_BUS, 2)]
    fake.emit_xid(1, 94)
    assert [(e.gpu_index, e.xid) for e in backend.wait_events(0)] == [(1, 94)]


def test_unexpected_wait_error_raises_backend_error() -> None:
    fake = FakeNvml.dgx(2)
    backend = _backend(fake)
    backend.wait_events(0)
    for event_set in fake.event_sets:
        event_set.freed = True  # the next wait answers INVALID_ARGUMENT
    with pytest.raises(GpuBackendError):
        backend.wait_events(0)


def test_close_frees_the_event_set_and_shuts_nvml_down() -> None:
    fake = FakeNvml.dgx(2)
    backend = _backend(fake)
    backend.wait_events(0)
    backend.sample(1.0)
    backend.close()
    assert all(s.freed for s in fake.event_sets) and fake.init_refs == 0
    backend.close()
