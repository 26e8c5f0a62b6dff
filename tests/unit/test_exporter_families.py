"""The lock-free metric families expose exactly what prometheus_client's own would."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmload.common.families import LabelledHistogram, LabelledValue
from llmload.exporter.buckets import LATENCY_BUCKETS, SCHEDULE_DELAY_BUCKETS


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a registry except ``_created``, keyed by name and labels."""
    out = {}
    for family in registry.collect():
        for s in family.samples:
            if not s.name.endswith("_created"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


values = st.lists(st.floats(min_value=0, max_value=120, allow_nan=False), max_size=60)


@settings(max_examples=60, deadline=None)
@given(values, values, st.sampled_from([LATENCY_BUCKETS, SCHEDULE_DELAY_BUCKETS]))
def test_histogram_matches_prometheus_client(a: list[float], b: list[float], bounds) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    ours_h = LabelledHistogram("x_seconds", "x", ["mode"], bounds, registry=ours)
    ref = Histogram("x_seconds", "x", ["mode"], buckets=bounds, registry=theirs)
    for mode in ("stream", "sync"):  # both label sets exist, even with no observation
        ours_h.labels(mode)
        ref.labels(mode)
    for v in a:
        ours_h.labels("stream").observe(v)
        ref.labels("stream").observe(v)
    ours_h.labels("sync").observe_many(b)
    for v in b:
        ref.labels("sync").observe(v)
    got, want = samples(ours), samples(theirs)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-9), key


def test_bucket_bounds_are_inclusive_and_overflow_goes_to_inf() -> None:
    reg = CollectorRegistry()
    h = LabelledHistogram("y_seconds", "y", ["mode"], (0.1, 1.0), registry=reg)
    h.labels("s").observe_many([0.1, 0.1000001, 1.0, 5.0])
    get = reg.get_sample_value
    assert get("y_seconds_bucket", {"mode": "s", "le": "0.1"}) == 1
    assert get("y_seconds_bucket", {"mode": "s", "le": "1.0"}) == 3
    assert get("y_seconds_bucket", {"mode": "s", "le": "+Inf"}) == 4
    assert get("y_seconds_count", {"mode": "s"}) == 4
    assert get("y_seconds_sum", {"mode": "s"}) == pytest.approx(6.2000001)


def test_counter_and_gauge_match_prometheus_client() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    c = LabelledValue("req", "r", ["status"], registry=ours)
    g = LabelledValue("inflight", "i", ["mode"], kind="gauge", registry=ours)
    rc = Counter("req", "r", ["status"], registry=theirs)
    rg = Gauge("inflight", "i", ["mode"], registry=theirs)
    for status in ("ok", "ok", "timeout"):
        c.labels(status).inc()
        rc.labels(status).inc()
    c.labels("ok").inc(2.5)
    rc.labels("ok").inc(2.5)
    for cell in (g.labels("stream"), rg.labels("stream")):
        cell.inc()
        cell.inc()
        cell.dec()
    assert samples(ours) == samples(theirs)
    text = generate_latest(ours).decode()
    assert "# TYPE req_total counter" in text  # text format 0.0.4 names the family NAME_total
    assert 'req_total{status="ok"} 4.5' in text
    parsed = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert parsed == {"req": "counter", "inflight": "gauge"}


def test_label_arity_and_bounds_are_checked() -> None:
    h = LabelledHistogram("z_seconds", "z", ["a", "b"], (1.0, 2.0))
    with pytest.raises(ValueError, match="expected labels"):
        h.labels("only-one")
    with pytest.raises(ValueError, match="increasing"):
        LabelledHistogram("w_seconds", "w", [], (2.0, 1.0))
    with pytest.raises(ValueError, match="kind"):
        LabelledValue("v", "v", [], kind="summary")
    with pytest.raises(ValueError, match="expected labels"):
        LabelledValue("u", "u", ["a"]).labels("x", "y")


def test_names_clash_with_other_collectors_in_one_registry() -> None:
    reg = CollectorRegistry()
    LabelledValue("dup", "d", [], registry=reg)
    with pytest.raises(ValueError):
        Counter("dup", "d", registry=reg)
