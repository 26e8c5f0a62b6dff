"""The engines' busy meters (target_server.busy): wall-time share and, for the synthetic
engine, the process's CPU share, both over a sliding window, on injected clocks."""

from __future__ import annotations

import pytest

from llmload.target_server.busy import CpuMeter


class Clock:
    def __init__(self, value: float = 0.0):
        self.value = value

    def __call__(self) -> float:
        return self.value


def test_cpu_meter_reads_the_cpu_share_of_its_window() -> None:
    cpu = Clock(7.0)  # CPU already used before the meter started is not counted
    meter = CpuMeter(window_s=10.0, mark_every_s=0.5, cpu=cpu)
    t0 = meter._marks[0][0]
    for k in range(1, 21):  # 20 s at 30 % of a core, read once a second (scrapes)
        cpu.value += 0.3
        assert meter.ratio(t0 + k) == pytest.approx(0.3)
    for k in range(21, 41):  # then a full core
        cpu.value += 1.0
        meter.ratio(t0 + k)
    assert meter.ratio(t0 + 40) == pytest.approx(1.0)
    cpu.value += 5.0  # two busy threads: clipped to 1
    assert meter.ratio(t0 + 41) == 1.0
    for k in range(42, 60):  # idle since: the share decays to 0
        meter.ratio(t0 + k)
    assert meter.ratio(t0 + 60) == pytest.approx(0.0)


def test_cpu_meter_first_read_is_not_the_start_up_cpu() -> None:
    cpu = Clock(3.0)
    meter = CpuMeter(cpu=cpu)
    assert meter.ratio(meter._marks[0][0] + 1.0) == 0.0
