"""Prometheus config rendering: the committed compose file is the rendered one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llmload.exporter import DEFAULT_PORT
from llmload.exporter.__main__ import main as exporter_main
from llmload.exporter.promconfig import ScrapeJob, render, render_compose

ROOT = Path(__file__).resolve().parents[2]


def test_committed_compose_config_is_up_to_date() -> None:
    committed = (ROOT / "compose/prometheus/prometheus.yml").read_text(encoding="utf-8")
    assert committed == render_compose(), (
        "regenerate: python -m llmload.exporter prometheus-config --compose "
        "> compose/prometheus/prometheus.yml"
    )


def test_compose_scrapes_target_and_exporter_with_rules() -> None:
    cfg = yaml.safe_load(render_compose())
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in cfg["scrape_configs"]}
    assert jobs["target"] == ["target:8000"]
    assert jobs["llmload"] == [f"locust-master:{DEFAULT_PORT}"]
    assert cfg["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    interval = cfg["global"]["scrape_interval"]
    assert interval.endswith("s") and 1 <= int(interval[:-1]) <= 5


def test_render_local_jobs() -> None:
    text = render(
        [
            ScrapeJob("llmload", ["127.0.0.1:1234"]),
            ScrapeJob("pgw", ["127.0.0.1:9", "::1"], honor_labels=True, metrics_path="/m"),
        ],
        scrape_interval="1s",
        rule_files=["/tmp/r/*.yml"],
    )
    cfg = yaml.safe_load(text)
    assert cfg["global"] == {
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "evaluation_interval": "1s",
    }
    assert cfg["rule_files"] == ["/tmp/r/*.yml"]
    first, second = cfg["scrape_configs"]
    assert first == {"job_name": "llmload", "static_configs": [{"targets": ["127.0.0.1:1234"]}]}
    assert second["honor_labels"] is True and second["metrics_path"] == "/m"
    assert second["static_configs"][0]["targets"] == ["127.0.0.1:9", "::1"]


def test_cli_writes_a_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.yml"
    rc = exporter_main(["prometheus-config", "--job", "a=127.0.0.1:1,127.0.0.1:2", "-o", str(out)])
    assert rc == 0
    cfg = yaml.safe_load(out.read_text())
    assert cfg["scrape_configs"][0]["static_configs"][0]["targets"] == [
        "127.0.0.1:1",
        "127.0.0.1:2",
    ]
    assert exporter_main(["nope"]) == 2
    with pytest.raises(SystemExit):
        exporter_main(["prometheus-config", "--job", "missing-equals"])
