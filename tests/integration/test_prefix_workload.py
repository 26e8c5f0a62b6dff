"""``llmload run --dataset prefix`` against the bundled server's prefix cache: the hit rate and the
TTFT split by hit and miss that the report shows are what the engine's arithmetic predicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmload.loadtests.options import RunOptions
from llmload.loadtests.percentile import percentile_of
from llmload.loadtests.workload.build import build_workload
from tests.fixtures.drive import loadtest
from tests.fixtures.loadtests import ROOT, CliRun

TRACE = str(ROOT / "docs" / "examples" / "traces" / "mooncake-sample.jsonl")

#: the engine: TTFT = 50 ms + 0.5 ms per uncached prompt token; blocks of 16 tokens
TTFT_MS, PREFILL_MS, BLOCK = 50.0, 0.5, 16
WORKLOAD = {
    "dataset": "prefix",
    "prefix_groups": 6,
    "prefix_len": 300,
    "suffix_len": 30,
    "output_len": 3,
    "prefix_skew": 1.0,
}


def flags(options: dict) -> list[str]:
    return [x for k, v in options.items() for x in ("--" + k.replace("_", "-"), str(v))]


def sent_prompts(records: list[dict]) -> list[tuple[dict, str, str]]:
    """``(record, group, text)`` per record, in start order: each user's prompts made again
    from the run's seed (a user's k-th request is its k-th prompt)."""
    workload = build_workload(RunOptions.of(**WORKLOAD).validate().workload, seed=0)
    out = []
    for user in {r["user_id"] for r in records}:
        mine = sorted((r for r in records if r["user_id"] == user), key=lambda r: r["started_at"])
        prompts = workload.for_user(user)
        for record in mine:
            p = prompts.next()
            prompts.record_reply("")
            out.append((record, p.prompt_id.split("/")[1].split("-")[0], p.prompt or ""))
    return sorted(out, key=lambda t: t[0]["started_at"])


def expected_cached(sent: list[tuple[dict, str, str]]) -> list[int]:
    """The engine's arithmetic by hand: a chat message is 4 role tokens, then its content's
    4-byte pieces; the first request of a group finds nothing, a later one is served the
    full 16-token blocks it shares with an earlier one of its group."""
    seen: dict[str, list[bytes]] = {}
    out = []
    for record, group, text in sent:
        data = text.encode()
        earlier = seen.setdefault(group, [])
        common = max((len(os.path.commonprefix([data, e])) for e in earlier), default=None)
        if common is None:
            out.append(0)
        else:
            tokens = min(4 + common // 4, record["prompt_tokens"] - 1)
            out.append(tokens // BLOCK * BLOCK)
        earlier.append(data)
    return out


def within(measured: float, expected: float, share: float = 0.05) -> bool:
    return abs(measured - expected) <= share * expected


@pytest.fixture(scope="module")
def server():
    from bench.procs import start_server_process

    args = ("--ttft-ms", str(TTFT_MS), "--prefill-ms-per-token", str(PREFILL_MS), "--itl-ms", "2")
    with start_server_process(*args, "--prefix-cache-blocks", "100000", "--block-size", "16") as p:
        yield p


def test_hit_rate_and_ttft_split_match_the_engines_arithmetic(server, tmp_path: Path):
    out = tmp_path / "run"
    summary = loadtest(
        out,
        "--target",
        server.url,
        *flags(WORKLOAD),
        "--max-concurrency",
        "4",
        "--num-prompts",
        "120",
        "--modes",
        "stream",
    )
    records = CliRun(0, "", "", out).records
    assert len(records) == 120 and all(r["status"] == "ok" for r in records)
    sent = sent_prompts(records)
    want = expected_cached(sent)
    groups = {g for _, g, _ in sent}
    assert sum(c == 0 for c in want) == len(groups) >= 4  # one miss per group drawn
    block = summary["phases"]["stream"]["prefix_cache"]
    prompt_tokens = sum(r["prompt_tokens"] for r in records)
    assert block["prompt_tokens"] == prompt_tokens and block["requests"] == 120
    expected_rate = sum(want) / prompt_tokens
    print(f"hit rate {block['hit_rate']:.4f}, engine arithmetic {expected_rate:.4f}")
    assert within(block["hit_rate"], expected_rate)
    assert block["hit_requests"] == sum(c > 0 for c in want)
    # TTFT: 50 ms + 0.5 ms per uncached token, the record's prompt tokens as the server counted
    predicted = [
        TTFT_MS + PREFILL_MS * (rec["prompt_tokens"] - c)
        for (rec, _, _), c in zip(sent, want, strict=True)
    ]
    for key, pick in (("ttft_hit_ms", lambda c: c > 0), ("ttft_miss_ms", lambda c: c == 0)):
        expect = percentile_of([p for p, c in zip(predicted, want, strict=True) if pick(c)], 50)
        got = block[key]["p50"]
        print(f"{key} p50 {got:.1f} ms, engine arithmetic {expect:.1f} ms")
        assert expect is not None and within(got, expect), (key, got, expect)
    html = (out / "report.html").read_text(encoding="utf-8")
    assert 'id="prefix-cache"' in html and f"{block['hit_rate']:.1%}" in html
    assert "## Prefix cache" in (out / "summary.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (("--rate", "2", "--dataset", "trace", TRACE), "the search is over its pace"),
        (("--users", "2", "--dataset", "trace", TRACE), "the search is over its pace"),
        (("--speedup", "2"), "it needs --dataset trace FILE"),
    ],
)
def test_capacity_search_names_a_load_that_does_not_fit_the_workload(
    given: tuple[str, ...], says: str
) -> None:
    """A trace keeps its timing (the search scales its pace); --speedup is a trace's only."""
    cmd = [sys.executable, "-m", "llmload", "capacity", "--target", "http://127.0.0.1:9"]
    cmd += ["--slo", "ttft_p95=600ms", *given]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert says in proc.stderr, proc.stderr


def test_the_gate_refuses_a_baseline_of_another_prefix_length(server, tmp_path: Path) -> None:
    """A --prefix-len 64 run against a --prefix-len 256 baseline is another workload: before
    the fingerprint was read from the option declarations, this passed and named nothing."""

    def run(prefix_len: int) -> Path:
        out = tmp_path / f"prefix-{prefix_len}"
        loadtest(
            out,
            *("--target", server.url, "--dataset", "prefix", "--prefix-len", str(prefix_len)),
            *("--prefix-groups", "4", "--suffix-len", "16", "--output-len", "3"),
            *("--max-concurrency", "4", "--num-prompts", "80", "--modes", "stream"),
        )
        return out

    def llmload(*args: str | Path) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "llmload", *map(str, args)]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)

    base, other = run(256), run(64)
    doc = tmp_path / "baseline.json"
    assert llmload("report", "baseline", base, "--out", doc).returncode == 0
    gate = ("report", "gate", other, "--baseline", doc, "--min-samples", "20")
    refused = llmload(*gate)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "not comparable with the baseline — --prefix-len: baseline 256, run 64" in refused.stdout
    verdict = json.loads((other / "gate.json").read_text())
    assert [d["key"] for d in verdict["differences"] if d["blocking"]] == ["prefix_len"]
    # allowed, the check is judged: a shorter shared prefix is less to prefill, never worse
    judged = llmload(*gate, "--allow-difference", "prefix-len")
    assert judged.returncode == 0, judged.stdout + judged.stderr
    assert (
        "noted: --prefix-len: baseline 256, run 64 (allowed by --allow-difference)" in judged.stdout
    )
