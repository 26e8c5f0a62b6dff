"""The machine's share: host CPU steal sampled, kept per phase, named by the trust box and
set beside the baseline runs' by the gate."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmload.loadtests.run import health as health_mod
from llmload.loadtests.run.health import HealthSampler
from llmload.loadtests.run.healthlog import phase_health
from llmload.loadtests.run.sinks import HarnessHealth
from llmload.reports.build import build_run
from llmload.reports.cli import main
from llmload.reports.gate.baseline import make_baseline
from llmload.reports.table.loader import load_run
from llmload.reports.table.trust import AMBER, GREEN, NA, STEAL_AMBER_PCT, assess, run_steal


def snap(steal: float) -> HarnessHealth:
    return HarnessHealth(cpu_percent=20.0, loop_lag_s=0.001, inflight=2, steal_percent=steal)


def test_the_sampler_reports_the_hosts_steal_between_two_snapshots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (all CPU seconds, of them stolen) as the host's counters would read them
    readings: Iterator[tuple[float, float]] = iter([(100.0, 1.0), (300.0, 21.0), (300.0, 21.0)])
    monkeypatch.setattr(health_mod, "host_times", lambda: next(readings))
    sampler = HealthSampler()
    assert sampler.snapshot().steal_percent == pytest.approx(10.0)  # 20 of 200 s
    assert sampler.snapshot().steal_percent == 0.0  # no time passed: nothing to divide


def test_the_real_host_counters_read_as_a_share() -> None:
    first = health_mod.host_times()
    sum(range(2_000_000))  # some CPU time passes
    total, stolen = health_mod.host_times()
    assert total > first[0] and 0.0 <= stolen - first[1] <= total - first[0]


def test_phase_health_keeps_the_steal_of_each_process_and_the_worst_host() -> None:
    h = phase_health({"local": [snap(0.0), snap(4.0), snap(2.0)], "worker-0": [snap(1.0)]})
    assert h["processes"]["local"]["steal_mean_pct"] == 2.0
    assert h["processes"]["local"]["steal_max_pct"] == 4.0
    assert h["steal_pct"] == 2.0


def with_steal(run: Path, per_phase: dict[str, float]) -> Path:
    meta = json.loads((run / "run.json").read_text())
    for ph in meta["phases"]:
        if ph["name"] in per_phase:
            ph["health"] = phase_health({"local": [snap(per_phase[ph["name"]])] * 5})
    (run / "run.json").write_text(json.dumps(meta))
    return run


def machine_item(run: Path) -> dict[str, Any]:
    items = {i["check"]: i for i in assess(build_run(run))["items"]}
    return items["machine (CPU steal)"]


def test_the_trust_box_names_the_machine_when_the_hypervisor_took_a_share(
    run_factory: Callable[..., Path],
) -> None:
    run = run_factory("steal")
    assert machine_item(run)["level"] == NA  # an older run: not recorded
    assert machine_item(with_steal(run, {"sync": 0.0, "stream": 0.0}))["level"] == NA
    item = machine_item(with_steal(run, {"sync": 0.3, "stream": 0.5}))
    assert item["level"] == GREEN and "stream: 0.5 %" in item["reason"]
    item = machine_item(with_steal(run, {"sync": 0.3, "stream": STEAL_AMBER_PCT * 4}))
    assert item["level"] == AMBER and "stream: 8.0 %" in item["reason"]
    assert "for no reason a build change made" in item["reason"]
    assert run_steal(json.loads((run / "run.json").read_text())) == pytest.approx(4.15)


def test_the_baseline_keeps_the_steal_and_the_gate_sets_it_beside_the_runs(
    run_factory: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "history"
    for i in range(3):
        base = with_steal(run_factory(f"base{i}", n=200, seed=i), {"stream": 0.2 * (i + 1)})
        doc = make_baseline(load_run(base))
        assert doc["machine"] == {"steal_pct": pytest.approx(0.2 * (i + 1))}
        assert main(["baseline", str(base), "--history", str(history)]) == 0
    calm = with_steal(run_factory("calm", n=200, seed=9), {"stream": 0.4})
    capsys.readouterr()
    main(["gate", str(calm), "--history", str(history)])
    assert "hypervisor CPU steal" not in capsys.readouterr().out  # nobody met enough to matter
    stolen = with_steal(run_factory("stolen", n=200, seed=9), {"stream": 9.0})
    main(["gate", str(stolen), "--history", str(history)])
    out = capsys.readouterr().out
    assert "hypervisor CPU steal on the load generator's host: this run 9.0 %" in out
    assert "the baseline runs' 0.2–0.6 % (mean 0.4 %)" in out
