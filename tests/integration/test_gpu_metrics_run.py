"""GPU telemetry on the run's timeline: ``llmload run --gpu-metrics URL``, the bundled server.

This machine has no GPU: the exporter is ``tests.fixtures.gpu_exporter``, a real
HTTP server serving dcgm-exporter's (or AMD's) documented families and labels
for two GPUs drawing a constant 300 W and 200 W, their energy counters the
integral of that power.  So a phase's energy is known from the window the
report says it measured: 500 W times its length; joules per output token follow
from the output tokens in ``requests.jsonl``.  Also: an exporter that dies
mid-run (after 6 scrapes: the probe, the phase's start, ~1 s of the phase; the
gap is named, the energy unknown, no record lost), energy counters that reset
(never a negative energy; the phase says so), and an exporter without an energy
counter (power integrated, and said so).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.gpu_exporter import WATTS, FakeExporter, serve
from tests.fixtures.loadtests import ROOT

INTERVAL_S = 0.25


def llmload_run(
    out: Path, target: str, gpu: str, duration: str = "3s", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmload", "run", "--out", str(out), "--status-interval", "60"]
        + ["--target", target, "--users", "4", "--pacing", "0s", "--duration", duration]
        + ["--modes", "stream", "--max-tokens", "16", "--ignore-eos"]
        + ["--gpu-metrics", gpu, "--server-metrics-interval", f"{INTERVAL_S}s"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def read(out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    return records, json.loads((out / "summary.json").read_text())


def span(block: dict[str, Any]) -> float:
    return block["window"]["to"] - block["window"]["from"]


def slack(out: Path, block: dict[str, Any]) -> float:
    """Seconds the exporter's clock can differ from the window's: it reads its counters when it
    answers, after the scrape was sent (``t``) — within each bounding scrape's round trip."""
    rtt = {}
    for line in (out / "gpu_metrics.jsonl").read_text().splitlines():
        d = json.loads(line)
        if "rtt_ms" in d:
            rtt[d["t"]] = d["rtt_ms"] / 1000
    return rtt[block["window"]["from"]] + rtt[block["window"]["to"]] + 0.002


def near(value: float, watts: float, block: dict[str, Any], out: Path) -> bool:
    """``value`` (J) is what ``watts`` drew over the block's window, within the slack."""
    return abs(value - watts * span(block)) <= watts * slack(out, block)


def test_energy_per_token_is_what_the_exporters_counters_imply(start_server_proc, tmp_path) -> None:
    server = start_server_proc("--ttft-ms", "40", "--itl-ms", "10")
    out = tmp_path / "run"
    with serve(FakeExporter()) as fake:
        done = llmload_run(out, server.url, fake.url)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NVIDIA dcgm-exporter, 2 GPU(s)" in done.stderr
    records, summary = read(out)
    block = summary["phases"]["stream"]["gpu"]
    assert block["exporter"] == "dcgm" and block["window"]["exact"]
    assert set(block["gpus"]) == {"fakehost/0", "fakehost/1"}
    for key, watts in zip(("fakehost/0", "fakehost/1"), WATTS, strict=True):
        g = block["gpus"][key]
        assert g["energy_source"] == "counter" and g["resets"] == 0
        assert near(g["energy_j"], watts, block, out), (g, span(block))
        assert g["power_w_mean"] == watts
    assert near(block["energy_j"], sum(WATTS), block, out), (block, span(block))
    tokens = sum(
        r["output_tokens"] for r in records if r["phase"] == "stream" and not r.get("warmup")
    )
    assert tokens and block["output_tokens"] == tokens
    assert block["joules_per_output_token"] == pytest.approx(block["energy_j"] / tokens)
    assert block["output_tokens_per_joule"] == pytest.approx(tokens / block["energy_j"])
    assert 0 < block["in_flight_mean"] <= 4
    assert block["watts_per_request_in_flight"] == pytest.approx(
        sum(WATTS) / block["in_flight_mean"]
    )
    assert block["gaps"] == [] and block["notes"] == []
    assert summary["gpu_metrics"]["gpus"] == ["fakehost/0", "fakehost/1"]
    assert "J/output token" in done.stdout and "J/output token" in (out / "summary.md").read_text()
    page = (out / "report.html").read_text()
    assert "chart-gpu-power" in page and "chart-gpu-util" in page and "all GPUs" in page
    lines = (out / "gpu_metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["meta"]["status"] == "scraping"
    assert "g" in json.loads(lines[1]) and "end" in json.loads(lines[-1])


def test_an_exporter_that_dies_mid_run_is_a_named_gap(start_server_proc, tmp_path) -> None:
    server = start_server_proc("--ttft-ms", "40", "--itl-ms", "10")
    out = tmp_path / "run"
    with serve(FakeExporter(die_after=6)) as fake:
        done = llmload_run(out, server.url, fake.url)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    records, summary = read(out)
    assert records and all(r["status"] == "ok" for r in records)  # nothing of the client lost
    phase = summary["phases"]["stream"]
    assert phase["count"] == len([r for r in records if r["phase"] == "stream"])
    assert "server" in phase  # the server's side is untouched
    assert "chart-gpu-power" in (out / "report.html").read_text()  # what was seen is drawn
    block = phase["gpu"]
    assert block["energy_j"] is None and block["joules_per_output_token"] is None
    assert block["gaps"] and block["gaps"][-1]["to_s"] is None
    assert 0 < block["gaps"][0]["from_s"] < 3
    assert any("did not answer" in n for n in block["notes"])
    assert any("energy unknown" in n for n in block["notes"])
    assert summary["gpu_metrics"]["failed"] >= 1


def test_a_counter_reset_is_said_never_a_negative_energy(start_server_proc, tmp_path) -> None:
    server = start_server_proc("--ttft-ms", "40", "--itl-ms", "10")
    out = tmp_path / "run"
    with serve(FakeExporter(reset_after=6)) as fake:
        done = llmload_run(out, server.url, fake.url)
    assert done.returncode == 0, done.stderr[-3000:]
    _, summary = read(out)
    block = summary["phases"]["stream"]["gpu"]
    assert block["all"]["resets"] == 2  # both GPUs' counters restarted once
    assert any("reset" in n for n in block["notes"])
    # what was drawn between the last scrape before the restart and the restart is unseen:
    # at most one interval of power
    most = sum(WATTS) * (span(block) + slack(out, block))
    assert most - sum(WATTS) * (INTERVAL_S + 2 * slack(out, block)) <= block["energy_j"] <= most


def test_amd_without_an_energy_counter_integrates_power(start_server_proc, tmp_path) -> None:
    server = start_server_proc("--ttft-ms", "40", "--itl-ms", "10")
    out = tmp_path / "run"
    with serve(FakeExporter(kind="amd", energy=False)) as fake:
        done = llmload_run(out, server.url, fake.url)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "AMD device metrics exporter, 2 GPU(s)" in done.stderr
    _, summary = read(out)
    block = summary["phases"]["stream"]["gpu"]
    assert block["energy_source"] == "power integrated"
    # integrated from the power gauge at the scrapes' own times: exact for a constant draw
    assert block["energy_j"] == pytest.approx(sum(WATTS) * span(block), rel=1e-6)
    assert block["all"]["util_pct_mean"] == pytest.approx(80.5)
    assert any("integrated" in n for n in block["notes"])


def test_report_compare_shows_energy_per_token(start_server_proc, tmp_path) -> None:
    """Run B's GPUs draw twice the power for the same load: ``report compare`` says its
    joules per output token are about twice A's, and worse."""
    server = start_server_proc("--ttft-ms", "40", "--itl-ms", "10")
    for name, watts in (("a", WATTS), ("b", tuple(2 * w for w in WATTS))):
        with serve(FakeExporter(watts=watts)) as fake:
            done = llmload_run(tmp_path / name, server.url, fake.url)
        assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run(
        [sys.executable, "-m", "llmload", "report", "compare"]
        + [str(tmp_path / "a"), str(tmp_path / "b")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    per_token = {
        n: read(tmp_path / n)[1]["phases"]["stream"]["gpu"]["joules_per_output_token"]
        for n in ("a", "b")
    }
    assert per_token["b"] / per_token["a"] == pytest.approx(2.0, rel=0.15)
    text = (tmp_path / "b" / "compare.md").read_text().splitlines()
    row = next(x for x in text if "GPU joules per output token" in x)
    assert "worse" in row, row


def test_capacity_curve_has_tokens_per_joule_at_each_step(start_server_proc, tmp_path) -> None:
    """A two-step sweep with the fake exporter: each step of the curve has its output tokens
    per joule, what 500 W and the step's tokens imply, and the table a column for it."""
    server = start_server_proc("--ttft-ms", "40", "--itl-ms", "10")
    out = tmp_path / "cap"
    with serve(FakeExporter()) as fake:
        done = subprocess.run(
            [sys.executable, "-m", "llmload", "capacity", "--target", server.url]
            + ["--sweep", "2", "--min", "1", "--max", "2", "--step-requests", "8"]
            + ["--min-step", "1s", "--max-step", "3s", "--warmup", "1s", "--max-tokens", "8"]
            + ["--ignore-eos", "--slo", "ttft_p95=5s", "--out", str(out)]
            + ["--gpu-metrics", fake.url, "--server-metrics-interval", f"{INTERVAL_S}s"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    records, summary = read(out)
    curve = summary["capacity"]["curve"]
    assert len(curve) == 2
    for p in curve:
        block = summary["phases"][p["phase"]]["gpu"]
        tokens = sum(r["output_tokens"] or 0 for r in records if r["phase"] == p["phase"])
        assert near(tokens / p["output_tokens_per_joule"], sum(WATTS), block, out)
    assert "out tok/J (GPU)" in (out / "summary.md").read_text()


def test_gate_metric_energy_fails_a_run_whose_gpus_draw_twice_the_power(
    start_server_proc, tmp_path
) -> None:
    """``report gate --metric energy``: the same load on GPUs drawing the same power passes; on
    GPUs drawing twice as much (twice the joules per output token) it fails."""
    server = start_server_proc("--ttft-ms", "40", "--itl-ms", "10")
    for name, watts in (("a", WATTS), ("same", WATTS), ("hot", tuple(2 * w for w in WATTS))):
        with serve(FakeExporter(watts=watts)) as fake:
            done = llmload_run(tmp_path / name, server.url, fake.url, duration="8s")
        assert done.returncode == 0, done.stderr[-3000:]

    def report(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "llmload", "report", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    base = tmp_path / "base.json"
    done = report("baseline", str(tmp_path / "a"), "--out", str(base))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(base.read_text())["rates"]["energy"]["stream"]["all"]
    same = report("gate", str(tmp_path / "same"), "--baseline", str(base), "--metric", "energy")
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-3000:]
    hot = report("gate", str(tmp_path / "hot"), "--baseline", str(base), "--metric", "energy")
    assert hot.returncode == 1, hot.stdout[-3000:] + hot.stderr[-3000:]
    assert "GPU energy per output token" in hot.stdout + hot.stderr


def test_llmloads_own_exporter_pushes_the_gpus_energy(start_server_proc, pushgateway, tmp_path):
    """``--pushgateway``: the run's final push holds each GPU's power and its energy since the
    run began — at 300 W and 200 W, in that ratio, and what the GPU scrapes' span implies."""
    server = start_server_proc("--ttft-ms", "40", "--itl-ms", "10")
    out = tmp_path / "run"
    with serve(FakeExporter()) as fake:
        done = subprocess.run(
            [sys.executable, "-m", "llmload", "run", "--out", str(out), "--status-interval", "60"]
            + ["--target", server.url, "--users", "2", "--duration", "2s", "--max-tokens", "8"]
            + ["--modes", "stream", "--gpu-metrics", fake.url, "--pushgateway", pushgateway.url]
            + ["--server-metrics-interval", f"{INTERVAL_S}s", "--no-report"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    pushed: dict[str, float] = {}
    for line in pushgateway.metrics().splitlines():
        if line.startswith("llmload_gpu_"):
            name, value = line.rsplit(" ", 1)
            pushed[name.split("{")[0] + "/" + name.split('gpu="')[1].split('"')[0]] = float(value)
    assert pushed["llmload_gpu_power_watts/fakehost/0"] == WATTS[0]
    assert pushed["llmload_gpu_power_watts/fakehost/1"] == WATTS[1]
    e0 = pushed["llmload_gpu_energy_joules_total/fakehost/0"]
    e1 = pushed["llmload_gpu_energy_joules_total/fakehost/1"]
    assert e0 > 0 and e0 / e1 == pytest.approx(WATTS[0] / WATTS[1], rel=1e-6)
    scrapes = [
        json.loads(x)
        for x in (out / "gpu_metrics.jsonl").read_text().splitlines()
        if '"rtt_ms"' in x
    ]
    # the push comes before the scraper's last word: at most the span of its scrapes
    assert e0 <= WATTS[0] * (scrapes[-1]["t"] - scrapes[0]["t"] + 0.5)


STUB = ROOT / "tests" / "fixtures" / "nvml_stub"


def test_nvml_reads_this_hosts_gpus(start_server_proc, tmp_path) -> None:
    """``--gpu-metrics nvml`` with the stand-in ``pynvml`` (no GPU here): GPU 0's energy from its
    counter, GPU 1 (no counter) its power integrated, the sum and the note say so."""
    import os

    from tests.fixtures.nvml_stub.pynvml import WATTS as NVML_WATTS

    server = start_server_proc("--ttft-ms", "40", "--itl-ms", "10")
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": f"{STUB}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, "-m", "llmload", "run", "--out", str(out), "--status-interval", "60"]
        + ["--target", server.url, "--users", "2", "--duration", "2s", "--max-tokens", "8"]
        + ["--modes", "stream", "--gpu-metrics", "nvml"]
        + ["--server-metrics-interval", f"{INTERVAL_S}s"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NVIDIA dcgm-exporter, 2 GPU(s)" in done.stderr
    _, summary = read(out)
    block = summary["phases"]["stream"]["gpu"]
    g0, g1 = block["gpus"].values()
    assert g0["energy_source"] == "counter" and near(g0["energy_j"], NVML_WATTS[0], block, out)
    assert g1["energy_source"] == "power integrated"
    assert g1["energy_j"] == pytest.approx(NVML_WATTS[1] * span(block), rel=1e-6)
    assert block["energy_source"] == "mixed" and any("integrated" in n for n in block["notes"])
    assert g0["mem_used_mib_max"] == 40 * 1024 and g1["temp_c_max"] == 61


def test_nvml_without_nvidia_ml_py_is_one_line(start_server_proc, tmp_path) -> None:
    """Where ``pynvml`` cannot be imported (forced, whatever this machine has installed): one
    line says so and the run goes on without GPU figures."""
    import os

    server = start_server_proc("--ttft-ms", "40", "--itl-ms", "10")
    out = tmp_path / "run"
    absent = ROOT / "tests" / "fixtures" / "nvml_absent"
    env = {**os.environ, "PYTHONPATH": f"{absent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = llmload_run(out, server.url, "nvml", duration="1s", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [x for x in done.stderr.splitlines() if x.startswith("GPU metrics:")]
    assert lines == [
        "GPU metrics: none (nvml: nvidia-ml-py is not installed (pip install 'llmload[gpu]'))"
    ]
    assert not (out / "gpu_metrics.jsonl").exists() and (out / "summary.json").exists()


def test_auto_finds_the_bundled_servers_own_gpu_on_its_metrics(
    start_server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The bundled server on CUDA serves its GPU's NVML figures on its own ``/metrics``, and
    ``--gpu-metrics auto`` (nothing on :9400) reads them there.  No GPU here: the server runs
    in this process with the synthetic engine declaring ``cuda_devices() == [0]`` and the
    stand-in ``pynvml`` (two GPUs) in ``sys.modules``; the app, its ``/metrics``, the run and
    its files are the real ones.  Only GPU 0 — the engine's — is on ``/metrics``."""
    import socket

    import httpx

    from llmload.target_server.settings import Settings
    from llmload.target_server.synthetic import SyntheticEngine
    from tests.fixtures.nvml_stub import pynvml as stub

    class OnCuda0(SyntheticEngine):
        def cuda_devices(self) -> list[int]:
            return [0]

    monkeypatch.setitem(sys.modules, "pynvml", stub)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    settings = Settings().with_overrides(ttft_ms=40, itl_ms=10)
    server = start_server(engine=OnCuda0(settings), ttft_ms=40, itl_ms=10)
    text = httpx.get(server.url + "/metrics").text
    power = [x for x in text.splitlines() if x.startswith("DCGM_FI_DEV_POWER_USAGE{")]
    assert len(power) == 1 and 'gpu="0"' in power[0] and power[0].endswith(" 250.0")
    assert 'gpu="1"' not in text and "llmserve_requests_running" in text
    out = tmp_path / "run"
    done = llmload_run(out, server.url, "auto")
    assert done.returncode == 0, done.stderr[-3000:]
    line = (
        f"GPU metrics: {server.url}/metrics every {INTERVAL_S:g} s (NVIDIA dcgm-exporter, 1 GPU(s))"
    )
    assert line in done.stderr
    meta = json.loads((out / "gpu_metrics.jsonl").read_text().splitlines()[0])["meta"]
    assert meta["status"] == "scraping" and meta["url"] == server.url + "/metrics"
    records, summary = read(out)
    block = summary["phases"]["stream"]["gpu"]
    key = f"{socket.gethostname()}/0"
    assert block["exporter"] == "dcgm" and set(block["gpus"]) == {key}
    g = block["gpus"][key]
    assert g["energy_source"] == "counter" and near(g["energy_j"], stub.WATTS[0], block, out)
    tokens = sum(r["output_tokens"] for r in records if r["phase"] == "stream")
    assert block["output_tokens"] == tokens
    assert block["joules_per_output_token"] == pytest.approx(block["energy_j"] / tokens)
    assert "server" in summary["phases"]["stream"]  # the server's own side as before


def test_auto_stays_silent_without_gpu_families(start_server, tmp_path: Path) -> None:
    """The synthetic engine has no GPU: its ``/metrics`` has no GPU family, so ``auto`` (nothing
    on :9400 either) scrapes no GPU and says nothing, as before."""
    import httpx

    server = start_server(ttft_ms=20, itl_ms=5)
    assert "DCGM_" not in httpx.get(server.url + "/metrics").text
    out = tmp_path / "run"
    done = llmload_run(out, server.url, "auto", duration="1s")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "GPU metrics" not in done.stderr
    assert not (out / "gpu_metrics.jsonl").exists() and (out / "server_metrics.jsonl").exists()
