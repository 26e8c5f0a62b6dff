"""The exporter's answer-shape metrics: TTFO, reasoning tokens, responses with no output."""

from __future__ import annotations

from llmload.exporter import LiveMetrics
from tests.unit.test_exporter import LAB, rec, run, value


def test_ttfo_reasoning_tokens_and_no_output_are_exported() -> None:
    m = LiveMetrics()
    reasoned = rec(0, ttfo_s=0.3, reasoning_tokens=3, output_tokens=10)
    plain = rec(1, ttfo_s=0.2, reasoning_tokens=0)
    empty = rec(2, ttft_s=None, ttfo_s=None, output_tokens=8, no_output=True, itl_s=[])
    warm = rec(3, ttfo_s=0.25, reasoning_tokens=2, warmup=True)
    run(m, reasoned, plain, empty, warm)
    # TTFO: ok, measured records that have one (as TTFT)
    assert value(m, "llmload_time_to_first_output_token_seconds_count", **LAB) == 2
    assert value(m, "llmload_time_to_first_output_token_seconds_sum", **LAB) == 0.5
    # counters: every record, warm-up included (as llmload_output_tokens_total)
    assert value(m, "llmload_reasoning_tokens_total", **LAB) == 3 + 2
    assert value(m, "llmload_no_output_responses_total", **LAB) == 1
    assert value(m, "llmload_output_tokens_total", **LAB) == 10 + 4 + 8 + 4
    text = m.render().decode()
    assert "# TYPE llmload_time_to_first_output_token_seconds histogram" in text
    assert "# TYPE llmload_no_output_responses_total counter" in text
