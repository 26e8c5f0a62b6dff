"""The SSE timing core with fake chunks and a fake clock: every case in issue 3's list."""

from __future__ import annotations

import json

import pytest

from llmload.loadtests.measure.adapters.openai_chat import OpenAIChat
from llmload.loadtests.measure.adapters.openai_completions import OpenAICompletions
from llmload.loadtests.measure.timing import StreamTimer
from tests.unit.timing_helpers import DONE, delta, ev, finish, meta, run_stream, usage


def tokens(*texts: str, start: float = 0.2, gap: float = 0.02) -> list[tuple[bytes, float]]:
    return [(delta(t), start + i * gap) for i, t in enumerate(texts)]


def test_happy_stream_all_fields():
    chunks = [(delta("", role="assistant"), 0.1), *tokens("a", "b", "c", "d")]
    chunks += [(finish(), 0.27), (usage(4, prompt=11), 0.28), (DONE, 0.29)]
    r = run_stream(chunks, 0.3)
    assert r.status == "ok" and r.error is None
    assert r.ttft_s == pytest.approx(0.2)
    assert r.ttst_s == pytest.approx(0.22)
    assert r.itl_s == pytest.approx([0.02, 0.02, 0.02])
    assert r.tpot_s == pytest.approx(0.02)
    assert r.e2e_s == pytest.approx(0.3)
    assert r.headers_s == pytest.approx(0.01)
    assert (r.output_tokens, r.token_source, r.prompt_tokens) == (4, "usage", 11)
    assert (r.usage_output_tokens, r.client_output_tokens) == (4, 4)
    assert r.tokens_per_event == [1, 1, 1, 1]
    assert r.finish_reason == "stop" and r.http_status == 200
    assert (r.request_id, r.mode, r.endpoint, r.started_at) == (
        "r-1",
        "stream",
        "/v1/chat/completions",
        1_700_000_000.0,
    )


def test_meta_fields_are_copied():
    timer = StreamTimer(OpenAIChat(), 0.0)
    timer.feed(delta("x") + DONE, 0.1)
    m = meta(schedule_delay_s=0.5, turn=2, worker="w3", user_id=9, warmup=True, phase="warm")
    r = timer.finish(0.2, m)
    assert (r.schedule_delay_s, r.turn, r.worker, r.user_id, r.warmup, r.phase) == (
        0.5,
        2,
        "w3",
        9,
        True,
        "warm",
    )


def test_event_split_across_reads_is_timed_when_it_completes():
    raw = delta("hello")
    r = run_stream([(raw[:7], 0.1), (raw[7:-1], 0.15), (raw[-1:], 0.2), (DONE, 0.3)], 0.3)
    assert r.ttft_s == pytest.approx(0.2)
    assert r.status == "ok"


def test_byte_by_byte_with_a_fake_clock():
    raw = delta("a") + delta("b") + DONE
    chunks = [(raw[i : i + 1], 0.001 * (i + 1)) for i in range(len(raw))]
    r = run_stream(chunks, 1.0)
    first_end = len(delta("a"))
    assert r.ttft_s == pytest.approx(0.001 * first_end)
    assert r.itl_s == pytest.approx([0.001 * len(delta("b"))])
    assert r.status == "ok" and r.output_tokens == 2 and r.token_source == "events"


def test_several_events_per_read_share_the_read_time():
    r = run_stream([(delta("a") + delta("b") + delta("c"), 0.5), (DONE, 0.6)], 0.6)
    assert r.ttft_s == pytest.approx(0.5)
    assert r.itl_s == [0.0, 0.0]
    assert r.tpot_s == 0.0


def test_crlf_framing():
    raw = (delta("x") + delta("y") + DONE).replace(b"\n", b"\r\n")
    r = run_stream([(raw, 0.2)], 0.25)
    assert r.status == "ok" and r.output_tokens == 2


def test_comments_do_not_count_and_do_not_move_last_event():
    timer = StreamTimer(OpenAIChat(), 0.0)
    timer.feed(b": keep-alive\n\n", 0.1)
    assert timer.last_event_at is None
    timer.feed(delta("x"), 0.3)
    timer.feed(b": keep-alive\n\n", 0.4)
    assert timer.last_event_at == 0.3
    timer.feed(DONE, 0.5)
    r = timer.finish(0.5, meta())
    assert r.ttft_s == pytest.approx(0.3) and r.status == "ok"


def test_role_only_and_empty_deltas_are_not_the_first_token():
    chunks = [
        (delta(role="assistant"), 0.05),
        (delta("", role="assistant"), 0.06),
        (delta(""), 0.07),
        (delta(None), 0.08),
        (ev({"choices": [{"index": 0, "delta": {"content": None}}]}), 0.09),
        (delta("first"), 0.4),
        (DONE, 0.5),
    ]
    r = run_stream(chunks, 0.5)
    assert r.ttft_s == pytest.approx(0.4)
    assert r.output_tokens == 1 and r.itl_s == []
    assert r.tpot_s is None  # one token: no decode interval


def test_usage_only_chunk_is_not_content_but_gives_tokens():
    chunks = [*tokens("ab", "cd"), (usage(5), 0.9), (DONE, 1.0)]
    r = run_stream(chunks, 1.0)
    assert r.ttft_s == pytest.approx(0.2)
    assert r.itl_s == pytest.approx([0.02])  # the usage chunk at 0.9 is no token
    assert (r.output_tokens, r.token_source, r.usage_output_tokens) == (5, "usage", 5)
    assert r.client_output_tokens == 2
    assert r.tpot_s == pytest.approx(0.02 / 4)  # (t_last - t_first) / (5 - 1)
    assert r.tokens_per_event == []  # 5 tokens in 2 events: the split is unknown


def test_reasoning_content_counts_as_content():
    chunks = [
        (delta(role="assistant"), 0.1),
        (delta(None, reasoning_content="think"), 0.2),
        (delta(None, reasoning="ing"), 0.25),
        (delta("answer"), 0.3),
        (DONE, 0.4),
    ]
    timer = StreamTimer(OpenAIChat(), 0.0)
    for c, t in chunks:
        timer.feed(c, t)
    assert timer.text == "answer"  # the reply kept as history leaves the reasoning out
    assert timer.reasoning_text == "thinking"
    r = timer.finish(0.4, meta())
    assert r.ttft_s == pytest.approx(0.2) and r.output_tokens == 3 and r.status == "ok"


def test_reasoning_counts_for_the_tokenizer():
    chunks = [(delta(None, reasoning_content="a b"), 0.2), (delta(" c"), 0.3), (DONE, 0.4)]
    r = run_stream(chunks, 0.4, tokenizer=lambda s: len(s.split()))
    assert (r.output_tokens, r.token_source, r.tokens_per_event) == (3, "tokenizer", [2, 1])


def test_a_non_sse_body_on_a_stream_is_protocol():
    body = b'{"choices": [{"message": {"content": "not streamed"}}]}'
    r = run_stream([(body, 0.3)], 0.3)
    assert r.status == "protocol" and "not an SSE stream" in (r.error or "")
    assert "not streamed" in (r.error or "")


def test_keepalives_then_eof_is_disconnect():
    r = run_stream([(b": ping\n\n", 0.3)], 0.4)
    assert r.status == "disconnect"


def test_named_error_event_is_protocol():
    r = run_stream([*tokens("a"), (b'event: error\ndata: {"message": "quota"}\n\n', 0.3)], 0.3)
    assert r.status == "protocol" and "quota" in (r.error or "")
    r = run_stream([(b"event: error\ndata: plain text\n\n", 0.3)], 0.3)
    assert r.status == "protocol" and "plain text" in (r.error or "")


def test_server_error_event_mid_stream_is_protocol():
    err = ev({"error": {"message": "engine crashed", "type": "server_error"}})
    r = run_stream([*tokens("a", "b"), (err, 0.5)], 0.5)
    assert r.status == "protocol"
    assert "engine crashed" in (r.error or "")
    assert r.ttft_s == pytest.approx(0.2)  # it happened before the error
    assert r.e2e_s == pytest.approx(0.5)


def test_error_event_wins_over_a_later_done():
    err = ev({"error": "overloaded"})
    r = run_stream([*tokens("a"), (err, 0.3), (DONE, 0.31)], 0.31)
    assert r.status == "protocol" and "overloaded" in (r.error or "")


def test_unparseable_data_is_protocol():
    r = run_stream([*tokens("a"), (b"data: {not json\n\n", 0.3), (DONE, 0.4)], 0.4)
    assert r.status == "protocol" and "unparseable" in (r.error or "")


def test_x_llmload_server_timings():
    x = {"queue_s": 0.003, "ttft_s": 0.198, "e2e_s": 0.61}
    chunks = [*tokens("a", "b"), (finish(x_llmload={**x, "queue_s": None}), 0.5)]
    chunks += [(usage(2, x_llmload=x), 0.55), (DONE, 0.6)]
    r = run_stream(chunks, 0.6)
    assert (r.server_queue_s, r.server_ttft_s, r.server_e2e_s) == (0.003, 0.198, 0.61)


def test_no_server_timings_means_none():
    r = run_stream([*tokens("a"), (DONE, 0.3)], 0.3)
    assert (r.server_queue_s, r.server_ttft_s, r.server_e2e_s) == (None, None, None)


def test_stream_cut_before_any_finish_reason_is_disconnect():
    r = run_stream(tokens("a", "b", "c"), 0.5)
    assert r.status == "disconnect"
    assert "finish_reason" in (r.error or "") and "end-of-stream" in (r.error or "")
    assert r.ttft_s == pytest.approx(0.2) and r.output_tokens == 3
    assert r.e2e_s is None  # the body never ended properly
    assert r.stream_end == "eof"  # the body ended, but not as a complete answer


def test_finish_reason_then_clean_eof_is_ok_without_done():
    """``transformers serve``: role chunk, content, finish chunk with usage, end of body."""
    chunks = [(delta(role="assistant"), 0.1), *tokens("a", "b")]
    chunks.append((finish("length", usage={"prompt_tokens": 5, "completion_tokens": 2}), 0.4))
    r = run_stream(chunks, 0.41)
    assert r.status == "ok" and r.error is None
    assert r.stream_end == "eof" and r.finish_reason == "length"
    assert r.output_tokens == 2 and r.token_source == "usage" and r.prompt_tokens == 5
    assert r.ttft_s == pytest.approx(0.2) and r.e2e_s == pytest.approx(0.41)


def test_stream_with_done_records_done():
    r = run_stream([*tokens("a"), (finish(), 0.3), (DONE, 0.31)], 0.31)
    assert r.status == "ok" and r.stream_end == "done"


def test_finish_reason_then_transport_cut_stays_disconnect():
    chunks = [*tokens("a"), (finish(), 0.3)]
    r = run_stream(chunks, 0.4, status="disconnect", error="RemoteProtocolError: peer closed")
    assert r.status == "disconnect" and r.stream_end is None and r.e2e_s is None


def test_sync_records_no_stream_end():
    timer = StreamTimer(OpenAIChat(), 0.0)
    timer.headers(0.1, 200)
    timer.feed_body(b'{"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}', 0.2)
    assert timer.finish(0.2, meta("sync")).stream_end is None


def test_truncated_trailing_event_is_disconnect_not_protocol():
    raw = delta("cut")
    r = run_stream([*tokens("a"), (raw[:-8], 0.4)], 0.5)
    assert r.status == "disconnect" and r.output_tokens == 1


def test_done_without_trailing_blank_line_still_counts():
    r = run_stream([*tokens("a"), (b"data: [DONE]", 0.4)], 0.45)
    assert r.status == "ok"


def test_http_500_with_openai_error_body():
    body = json.dumps({"error": {"message": "CUDA out of memory", "type": "server_error"}})
    raw = body.encode()
    r = run_stream([(raw[:10], 0.05), (raw[10:], 0.06)], 0.07, http_status=500)
    assert r.status == "http_5xx" and r.http_status == 500
    assert r.error == "HTTP 500: server_error: CUDA out of memory"
    assert r.ttft_s is None and r.output_tokens == 0 and r.itl_s == []
    assert r.e2e_s == pytest.approx(0.07) and r.headers_s == pytest.approx(0.01)


def test_http_429_and_non_json_bodies():
    r = run_stream([(b"Too Many Requests", 0.02)], 0.02, http_status=429)
    assert (r.status, r.error) == ("http_4xx", "HTTP 429: Too Many Requests")
    r = run_stream([(b'{"detail": "Not Found"}', 0.02)], 0.02, http_status=404)
    assert (r.status, r.error) == ("http_4xx", "HTTP 404: Not Found")
    r = run_stream([], 0.02, http_status=502)
    assert (r.status, r.error) == ("http_5xx", "HTTP 502")


def test_explicit_transport_status_wins():
    r = run_stream([*tokens("a", "b")], 5.0, status="stall", error="no event for 3 s")
    assert (r.status, r.error) == ("stall", "no event for 3 s")
    assert r.ttft_s == pytest.approx(0.2) and r.e2e_s is None
    r = run_stream([(b"oops", 0.1)], 0.2, http_status=503, status="timeout")
    assert r.status == "timeout" and r.error == "timeout"
    r = run_stream([], 0.9, headers_at=None, status="connect", error="connection refused")
    assert r.status == "connect" and r.headers_s is None and r.ttft_s is None and r.e2e_s is None
    assert r.http_status is None
    with pytest.raises(ValueError):
        run_stream([], 0.1, status="weird")


def test_sync_body_ttft_equals_e2e_and_keeps_headers():
    body = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "全部"}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 32},
        "x_llmload": {"queue_s": 0.0, "ttft_s": 0.2, "e2e_s": 0.82},
    }
    timer = StreamTimer(OpenAIChat(), 10.0)
    timer.headers(10.05, 200)
    timer.feed_body(json.dumps(body).encode(), 10.83)
    assert timer.text == "全部" and timer.last_event_at == 10.83
    r = timer.finish(10.83, meta("sync"))
    assert r.status == "ok" and r.mode == "sync"
    assert r.ttft_s == pytest.approx(0.83) and r.e2e_s == pytest.approx(0.83)
    assert r.headers_s == pytest.approx(0.05)
    assert (r.output_tokens, r.token_source, r.prompt_tokens) == (32, "usage", 9)
    assert r.itl_s == [] and r.tpot_s is None and r.ttst_s is None
    assert r.server_ttft_s == 0.2 and r.client_output_tokens is None


def test_sync_unparseable_and_error_bodies():
    timer = StreamTimer(OpenAIChat(), 0.0)
    timer.headers(0.01, 200)
    timer.feed_body(b"<html>gateway</html>", 0.02)
    assert timer.finish(0.02, meta("sync")).status == "protocol"
    timer = StreamTimer(OpenAIChat(), 0.0)
    timer.headers(0.01, 200)
    timer.feed_body(b'{"error": {"message": "bad things"}}', 0.02)
    r = timer.finish(0.02, meta("sync"))
    assert r.status == "protocol" and "bad things" in (r.error or "")
    timer = StreamTimer(OpenAIChat(), 0.0)
    timer.headers(0.01, 400)
    timer.feed_body(b'{"error": {"message": "max_tokens too large", "type": "invalid"}}', 0.02)
    r = timer.finish(0.02, meta("sync"))
    assert r.status == "http_4xx" and r.error == "HTTP 400: invalid: max_tokens too large"


def test_tokenizer_path_counts_the_full_text():
    calls: list[str] = []

    def tokenizer(text: str) -> int:
        calls.append(text)
        return len(text.split())

    chunks = [*tokens("one two", " three", " four five six"), (DONE, 0.5)]
    r = run_stream(chunks, 0.5, tokenizer=tokenizer)
    assert (r.output_tokens, r.token_source) == (6, "tokenizer")
    assert r.client_output_tokens == 6 and r.usage_output_tokens is None
    assert "one two three four five six" in calls
    assert r.tokens_per_event == [2, 1, 3]
    assert r.tpot_s == pytest.approx(0.04 / 5)


def test_usage_beats_tokenizer_and_both_are_kept():
    chunks = [*tokens("one two", " three"), (usage(4), 0.4), (DONE, 0.5)]
    r = run_stream(chunks, 0.5, tokenizer=lambda s: len(s.split()))
    assert (r.output_tokens, r.token_source) == (4, "usage")
    assert (r.usage_output_tokens, r.client_output_tokens) == (4, 3)


def test_sync_tokenizer_without_usage():
    body = {"choices": [{"index": 0, "message": {"content": "a b c"}, "finish_reason": "length"}]}
    timer = StreamTimer(OpenAIChat(), 0.0, tokenizer=lambda s: len(s.split()))
    timer.feed_body(json.dumps(body).encode(), 0.3)
    r = timer.finish(0.3, meta("sync"))
    assert (r.output_tokens, r.token_source, r.finish_reason) == (3, "tokenizer", "length")
    assert r.tokens_per_event == [3]


def test_continuous_usage_gives_tokens_per_event():
    def chunk(text: str, total: int) -> bytes:
        u = {"prompt_tokens": 3, "completion_tokens": total}
        return ev({"choices": [{"index": 0, "delta": {"content": text}}], "usage": u})

    r = run_stream([(chunk("ab", 2), 0.1), (chunk("c", 3), 0.2), (DONE, 0.3)], 0.3)
    assert r.tokens_per_event == [2, 1] and r.output_tokens == 3


def test_text_grows_as_events_arrive():
    timer = StreamTimer(OpenAIChat(), 0.0)
    timer.feed(delta("春"), 0.1)
    assert timer.text == "春"
    timer.feed(delta("天"), 0.2)
    assert timer.text == "春天" and timer.last_event_at == 0.2


def test_completions_adapter_through_the_timer():
    def text(t: str) -> bytes:
        return ev({"object": "text_completion", "choices": [{"index": 0, "text": t}]})

    chunks = [(text(""), 0.1), (text("x"), 0.2), (text("y"), 0.3), (usage(2), 0.31), (DONE, 0.32)]
    r = run_stream(chunks, 0.32, adapter=OpenAICompletions())
    assert r.status == "ok" and r.ttft_s == pytest.approx(0.2) and r.output_tokens == 2
    assert r.tpot_s == pytest.approx(0.1)


def test_record_survives_the_jsonl_round_trip():
    from llmload.loadtests.measure.record import RequestRecord

    chunks = [*tokens("春", "天"), (usage(2, x_llmload={"ttft_s": 0.1}), 0.3), (DONE, 0.31)]
    r = run_stream(chunks, 0.31)
    assert RequestRecord.from_json(r.to_json()) == r


def test_an_unwrapped_error_object_mid_stream_is_protocol():
    """Older vLLM streams ``{"object": "error", "message": ...}`` without an ``error`` key."""
    err = ev({"object": "error", "message": "engine died", "type": "InternalServerError"})
    r = run_stream([*tokens("a"), (err, 0.3), (DONE, 0.31)], 0.31)
    assert r.status == "protocol" and "engine died" in (r.error or "")
