"""GPU telemetry's pure parts: the recorded exporter texts per GPU, counter increase across a
reset, power integration, gaps, ``auto``'s endpoint.  (No GPU here: the texts are recorded from
the exporters' documented formats, ``tests/fixtures/metrics/gpu/``.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmload.gpumetrics import auto_url
from llmload.loadtests import gpufamilies as gf
from llmload.loadtests.run.promsample import Sample, Sampler, read_sample
from llmload.reports.server.gpu import gaps, increase, integrate
from llmload.reports.table.scrapes import Scrape, ServerRun

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "gpu"


@pytest.mark.parametrize(
    ("name", "key", "gpus", "power"),
    [
        ("dcgm", "dcgm", ["node-a/0", "node-a/1"], 412.561),
        ("amd", "amd", ["node-b/0", "node-b/1"], 612),
    ],
)
def test_recorded_texts_are_read_per_gpu(
    name: str, key: str, gpus: list[str], power: float
) -> None:
    s = Sampler(gf.known_names(), gf.ID_LABELS).sample((FIXTURES / f"{name}.txt").read_text(), True)
    exp = gf.detect(s.names())
    assert exp is not None and exp.key == key
    fam = exp.for_role("power")[0].name
    assert sorted(s.per[fam]) == gpus and s.per[fam][gpus[0]] == power
    assert s.values[fam] == pytest.approx(sum(s.per[fam].values()))  # summed too
    assert exp.for_role("energy")[0].name in s.per
    assert read_sample(s.to_json()).per == s.per  # the file keeps the per-GPU figures


def test_a_server_scrape_keeps_no_per_gpu_block() -> None:
    s = Sampler(gf.known_names()).sample((FIXTURES / "dcgm.txt").read_text(), True)
    assert s.per == {} and "g" not in s.to_json()


def test_increase_survives_a_reset() -> None:
    assert increase([10.0, 15.0, 20.0]) == (10.0, 0)
    assert increase([10.0, 15.0, 3.0, 7.0]) == (5.0 + 3.0 + 4.0, 1)  # never negative


def test_integrate_is_trapezoids() -> None:
    assert integrate([(0.0, 100.0), (1.0, 300.0), (3.0, 300.0)]) == 200.0 + 600.0
    assert integrate([(0.0, 100.0)]) == 0.0


def test_gaps_are_grouped_between_answers() -> None:
    sr = ServerRun(meta={}, scrapes=[Scrape(t, Sample()) for t in (100.0, 101.0, 104.0)])
    sr.failed = [(102.0, "x"), (103.0, "x"), (105.0, "x"), (106.0, "x")]
    assert gaps(sr, 100.0, 106.0, 0.0) == [
        {"from_s": 1.0, "to_s": 4.0, "failed": 2},
        {"from_s": 4.0, "to_s": None, "failed": 2},
    ]


def test_auto_is_dcgm_exporters_port_on_the_target_host() -> None:
    assert auto_url("https://gpu-box.example:8000/v1") == "http://gpu-box.example:9400/metrics"
    assert auto_url("http://[::1]:8000") == "http://[::1]:9400/metrics"


def test_cumulative_energy_sums_gpus_across_a_reset_and_integrates_without_a_counter() -> None:
    from llmload.reports.server.gpu import cumulative_energy

    energy, power = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_POWER_USAGE"

    def scrape(t: float, mj: float | None, watts: float) -> Scrape:
        per = {power: {"h/0": watts, "h/1": watts}}
        if mj is not None:
            per[energy] = {"h/0": mj}  # GPU 1 has no energy counter
        values = {name: sum(v.values()) for name, v in per.items()}  # the sum, as scraped
        return Scrape(t, Sample(values=values, per=per))

    sr = ServerRun(meta={}, scrapes=[scrape(0.0, 1000.0, 100.0), scrape(1.0, 101000.0, 100.0)])
    sr.scrapes.append(scrape(2.0, 50000.0, 300.0))  # GPU 0's counter restarted: 50 J since
    times, joules = cumulative_energy(sr)
    assert times.tolist() == [0.0, 1.0, 2.0]
    # GPU 0: 100 J, then 50 J; GPU 1 (power integrated): 100 J, then 200 J
    assert joules.tolist() == pytest.approx([0.0, 200.0, 450.0])
