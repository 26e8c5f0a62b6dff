"""``llmload capacity`` over HTTP against the bundled server with its prefix cache on: each
step sends prompts of its own, so the cache cannot serve a step the prompts of an earlier
one (it would flatter the higher loads' TTFT and overstate the capacity), and the same seed
sends the same prompts.

``--dataset random --range-ratio 0.5`` makes every draw a new text of its own length, so a
request's ``prompt_tokens`` tells prompts apart and ``cached_tokens`` shows any reuse (two
texts of random words never share a 16-token block).  Open loop an arrival's prompt is
fixed by the seed, its step's lap and its number; closed loop each user's sequence is fixed
by the seed and carried on from step to step (how far a user gets in a step is the
server's timing)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.loadtests import llmload

SERVER = ("--ttft-ms", "5", "--itl-ms", "1", "--prefix-cache-blocks", "100000")
COMMON = (
    "--dataset", "random", "--input-len", "64", "--range-ratio", "0.5", "--output-len", "4",
    "--slo", "ttft_p50=2000ms", "--confidence", "0.9", "--step-requests", "30",
    "--min-step", "1s", "--warmup", "1s", "--seed", "5", "--no-report",
)  # fmt: skip
SEARCHES = {
    "users": ("--users", "--sweep", "3", "--min", "2", "--max", "4"),
    "rate": ("--rate", "--sweep", "3", "--min", "10", "--max", "20", "--arrival", "constant"),
}


def search(url: str, out: Path, how: str) -> tuple[list[str], list[dict[str, Any]]]:
    """One search: its steps' phase names and the records of its steps (warm-up left out)."""
    proc = llmload("capacity", "--target", url, *SEARCHES[how], *COMMON, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    steps = [s["phase"] for s in run["capacity"]["steps"]]
    assert len(steps) == 3, run["capacity"]["steps"]
    lines = (out / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    records = [r for r in map(json.loads, lines) if not r["warmup"]]
    assert records and all(r["status"] == "ok" and r["prompt_tokens"] for r in records)
    return steps, sorted(records, key=lambda r: r["started_at"])


def per_user(records: list[dict[str, Any]]) -> dict[int, list[int]]:
    """Each user's prompt lengths in the order it sent them (over every step)."""
    out: dict[int, list[int]] = defaultdict(list)
    for r in records:
        out[r["user_id"]].append(r["prompt_tokens"])
    return out


@pytest.mark.parametrize("how", ["users", "rate"])
def test_each_step_sends_prompts_of_its_own_and_the_seed_fixes_them(
    start_server_proc, tmp_path: Path, how: str
) -> None:
    server = start_server_proc(*SERVER)
    steps, first = search(server.url, tmp_path / "first", how)
    # a fresh server: nothing any step sent was in the cache before it (no step, the warm-up
    # included, sent an earlier one's prompts), so no request found a cached block
    assert sum(r["cached_tokens"] or 0 for r in first) == 0, [
        (r["phase"], r["prompt_tokens"], r["cached_tokens"]) for r in first if r["cached_tokens"]
    ]
    lengths = {s: Counter(r["prompt_tokens"] for r in first if r["phase"] == s) for s in steps}
    for a, b in zip(steps, steps[1:], strict=False):
        assert lengths[a] != lengths[b], (a, b)  # different draws, not step 1's again
    # the same seed again, on the same server: the same prompts — so now they are cached
    again, second = search(server.url, tmp_path / "second", how)
    assert again == steps
    if how == "rate":  # an arrival's prompt is its seed's, its lap's and its number's
        for s in steps:
            assert Counter(r["prompt_tokens"] for r in second if r["phase"] == s) == lengths[s]
        assert all(r["cached_tokens"] >= r["prompt_tokens"] - 16 for r in second)
    else:  # each user's sequence is the seed's; where a step cut it is the server's timing
        users1, users2 = per_user(first), per_user(second)
        assert set(users1) == set(users2) == {0, 1, 2, 3}
        compared = 0
        for u, seq in users1.items():
            n = min(len(seq), len(users2[u]))
            assert n >= 1 and users2[u][:n] == seq[:n], u
            compared += n
        assert compared >= 45  # of the 90 requests each search's steps sent
