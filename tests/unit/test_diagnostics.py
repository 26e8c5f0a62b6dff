"""The proxy-buffering and token-mismatch detectors on hand-built records."""

from __future__ import annotations

from typing import Any

import pytest

from llmload.loadtests.measure.record import RequestRecord
from llmload.reports.table import diagnostics
from llmload.reports.table.diagnostics import detect


def _rec(i: int, **kw: Any) -> RequestRecord:
    base: dict[str, Any] = dict(
        request_id=f"r{i}",
        phase="stream",
        scenario="s",
        mode="stream",
        endpoint="/v1/chat/completions",
        started_at=0.0,
        status="ok",
    )
    base.update(kw)
    return RequestRecord(**base)


def _streamed(i: int, ttft: float, gaps: list[float], **kw: Any) -> RequestRecord:
    return _rec(i, ttft_s=ttft, itl_s=gaps, e2e_s=ttft + sum(gaps) + 0.001, **kw)


def _buffered(i: int) -> RequestRecord:
    # the server sent its first token at 100 ms and its last at 420 ms; all arrived at ~421 ms
    return _streamed(i, 0.42, [0.0001] * 16, server_ttft_s=0.1, server_e2e_s=0.42)


def _spaced(i: int, **kw: Any) -> RequestRecord:
    return _streamed(i, 0.102, [0.02] * 16, server_ttft_s=0.1, server_e2e_s=0.42, **kw)


def test_buffered_phase_is_flagged_with_hint_and_evidence() -> None:
    found = detect([_buffered(i) for i in range(5)], "stream")
    assert [d.code for d in found] == ["proxy_buffering"]
    d = found[0]
    assert "proxy_buffering off" in d.hint and "X-Accel-Buffering: no" in d.hint
    assert d.evidence["buffered_requests"] == 5 and d.evidence["streamed_requests"] == 5
    assert 300 < d.evidence["median_client_minus_server_ttft_ms"] < 330
    assert d.to_dict()["code"] == "proxy_buffering"


def test_spaced_stream_is_not_flagged() -> None:
    assert detect([_spaced(i) for i in range(5)], "stream") == []


def test_a_fast_server_that_reports_its_timings_is_not_flagged() -> None:
    # sub-millisecond tokens right after a long TTFT: nothing was held back
    recs = [
        _streamed(i, 0.5, [0.0002] * 30, server_ttft_s=0.499, server_e2e_s=0.506) for i in range(4)
    ]
    assert detect(recs, "stream") == []


def test_without_server_timings_ttft_near_e2e_decides() -> None:
    held = [_streamed(i, 0.9, [0.0003] * 10) for i in range(4)]
    assert [d.code for d in detect(held, None)] == ["proxy_buffering"]
    assert detect(held, {"mode": "sync"}) == []  # a sync phase cannot show buffering
    fast_tail = [_streamed(i, 0.2, [0.0003] * 10 + [0.5]) for i in range(4)]
    assert detect(fast_tail, "stream") == []


def test_minority_or_too_few_or_failed_records_do_not_flag() -> None:
    mixed = [_buffered(0), _spaced(1), _spaced(2), _spaced(3)]
    assert detect(mixed, "stream") == []
    assert detect([_buffered(0), _buffered(1)], "stream") == []
    failed = [_rec(i, status="disconnect", ttft_s=0.4, itl_s=[0.0] * 8) for i in range(5)]
    assert detect(failed, "stream") == []
    short = [_streamed(i, 0.4, [0.0, 0.0], server_ttft_s=0.1, server_e2e_s=0.4) for i in range(5)]
    assert detect(short, "stream") == []


def test_partial_buffering_in_a_few_bursts_is_flagged() -> None:
    # three 4 KB bursts: most gaps ~0, two big gaps, first token held by the first burst
    gaps = ([0.0001] * 10 + [0.15]) * 2 + [0.0001] * 10
    recs = [_streamed(i, 0.3, gaps, server_ttft_s=0.05, server_e2e_s=0.65) for i in range(4)]
    assert [d.code for d in detect(recs, "stream")] == ["proxy_buffering"]


def test_token_count_mismatch_tolerates_eos_but_flags_a_wrong_tokenizer() -> None:
    eos = [_spaced(i, usage_output_tokens=17, client_output_tokens=16) for i in range(5)]
    assert detect(eos, "stream") == []
    # no --tokenizer: the client count is the 17 content events, the server packed 2 per event
    packed = [_spaced(i, usage_output_tokens=34, client_output_tokens=17) for i in range(5)]
    assert detect(packed, "stream") == []
    wrong = [_spaced(i, usage_output_tokens=17, client_output_tokens=40) for i in range(5)]
    found = detect(wrong, "stream")
    assert [d.code for d in found] == ["token_count_mismatch"]
    assert found[0].evidence["rate"] == 1.0
    assert found[0].evidence["median_client_minus_usage_tokens"] == 23


def test_thresholds_are_module_constants() -> None:
    assert 0 < diagnostics.BURST_GAP_S < 0.01 and 0 < diagnostics.FLAG_SHARE <= 1


def _gateway(i: int, **kw: Any) -> RequestRecord:
    # ~34 ms per token, then an 866 ms stall, then 27 tokens 0.6 ms apart (issue 12's LiteLLM run)
    gaps = [0.034] * 12 + [0.866] + [0.0006] * 27
    return _streamed(i, 0.5, gaps, **kw)


def test_stalls_followed_by_bursts_are_stutter_with_a_plain_hint() -> None:
    found = detect([_gateway(i) for i in range(4)] + [_spaced(9)], "stream")
    assert [d.code for d in found] == ["stream_stutter"]
    d = found[0]
    assert d.evidence["stuttering_requests"] == 4 and d.evidence["streamed_requests"] == 5
    assert d.evidence["median_longest_stall_ms"] == pytest.approx(866)
    assert "gateway" in d.hint and "straight at the model server" in d.hint
    # no server timings: the report says which numbers can no longer be split
    assert d.evidence["server_timings"] is False
    assert "cannot be split into server time and path" in d.hint


def test_stutter_with_server_timings_does_not_claim_they_are_missing() -> None:
    recs = [_gateway(i, server_ttft_s=0.2, server_e2e_s=1.0) for i in range(4)]
    d = detect(recs, "stream")[0]
    assert d.code == "stream_stutter" and d.evidence["server_timings"] is True
    assert "cannot be split" not in d.hint


def test_a_slow_step_without_a_burst_after_it_is_not_stutter() -> None:
    # a prefill of another request delays one token (a real ITL spike), then normal pace
    gaps = [0.02] * 10 + [0.3] + [0.02] * 10
    assert diagnostics.stall_then_burst(gaps) is None
    assert detect([_streamed(i, 0.1, gaps) for i in range(5)], "stream") == []
    # a fast server: all gaps sub-millisecond, no stall
    fast = detect([_streamed(i, 0.1, [0.0002] * 40) for i in range(5)], "stream")
    assert "stream_stutter" not in [d.code for d in fast]


def test_few_stuttering_streams_or_a_sync_phase_do_not_flag() -> None:
    assert detect([_gateway(0)] + [_spaced(i) for i in range(1, 8)], "stream") == []
    assert detect([_gateway(i) for i in range(4)], "sync") == []


def test_buffering_without_server_timings_names_the_numbers_that_cannot_be_split() -> None:
    held = [_streamed(i, 0.9, [0.0003] * 10) for i in range(4)]
    (d,) = detect(held, "stream")
    assert d.code == "proxy_buffering" and "cannot be split" in d.hint
    (d,) = detect([_buffered(i) for i in range(5)], "stream")
    assert "cannot be split" not in d.hint


def test_streams_without_done_are_noted_once_per_phase() -> None:
    recs = [_spaced(i, stream_end="eof", finish_reason="length") for i in range(6)]
    found = detect(recs, "stream")
    assert [d.code for d in found] == ["no_done_marker"]
    assert "sends no [DONE]" in found[0].message
    assert found[0].evidence == {"streamed_requests": 6, "ended_without_done": 6}
    assert detect([_spaced(i, stream_end="done") for i in range(6)], "stream") == []


def test_a_connection_per_request_is_named_with_its_cost() -> None:
    recs = [
        _spaced(i, user_id=i % 3, started_at=float(i), connect_s=0.004 if i % 7 else 0.002)
        for i in range(12)
    ]
    (d,) = detect(recs, "sync")
    assert d.code == "connection_per_request" and "keep-alive" in d.hint
    assert d.evidence["judged_requests"] == 9 and d.evidence["new_connections"] == 9
    assert d.evidence["median_connect_ms"] == pytest.approx(4.0)


def test_kept_alive_connections_are_not_flagged() -> None:
    # each user's first request opens its connection, later ones reuse it
    kept = [
        _spaced(i, user_id=i % 4, started_at=float(i), connect_s=0.003 if i < 4 else None)
        for i in range(12)
    ]
    assert detect(kept, "stream") == []
    # one request per user (e.g. --num-prompts = --users): nothing to judge
    once = [_spaced(i, user_id=i, started_at=0.0, connect_s=0.003) for i in range(12)]
    assert detect(once, "stream") == []


def test_records_without_a_user_are_not_judged_for_connections() -> None:
    recs = [_spaced(i, started_at=float(i), connect_s=0.003) for i in range(8)]
    assert detect(recs, "stream") == []
