"""Run options: each declared once — flag, default, help, check — in frozen groups.

Precedence: built-in defaults < plan file (``--plan``, TOML) < command line.  A
plan uses the long flag names as keys (``spawn-rate`` or ``spawn_rate``),
durations as strings (``"3s"``, ``"5m"``) or seconds, lists or comma strings for
``modes``/``header``, and an optional ``[shape]`` table (``kind = "steps"``, ...).

The shape (read this before adding an option):

* ``RunOptions`` holds five frozen groups — ``connection`` (which target, how
  to talk to it), ``load`` (users, shape, phases), ``workload`` (prompts and
  sampling), ``output`` (run files, report, live sinks) and ``distributed``
  (master/worker).  A layer takes the group it needs (``Target`` takes
  ``ConnectionOptions``, the workload builder ``WorkloadOptions``, ...).
* A field is declared once, with ``option(default, help, compare=..., ...)``:
  its flag (``--`` + the name with dashes, plus ``aliases``), type (the
  annotation), ``choices``, ``parse`` (normalise a plan or flag value:
  durations, lists, fractions), ``check`` (a predicate and the message when it
  fails) and ``compare`` — whether a difference between two runs blocks a
  comparison, is noted, or does not matter (required: the gate's fingerprint
  is read from it).  The parser (``loadtests.run.cli``), ``--help``, the TOML
  plan keys, the table in docs/loadgen.md (``options_table``), ``run.json`` and
  the fingerprint all read it.
* Adding an option: one ``option(...)`` line in its group, and its test.
  Checks that relate several options live in ``RunOptions._relations``.
* ``validate()`` returns a new, normalised value; change one with
  ``opts.with_(name=value)`` (flat names, any group).
"""

from __future__ import annotations

import json
import math
import tomllib
import typing
from collections.abc import Callable, Iterator
from dataclasses import MISSING, Field, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from llmload.loadtests.durations import parse_duration, parse_fraction, parse_span
from llmload.loadtests.recordfile import COMPRESSIONS
from llmload.loadtests.redact import redact_header, redact_url, redact_value
from llmload.loadtests.sizes import MIB, parse_size
from llmload.loadtests.slo import parse_slo

MODES = ("sync", "stream")
ARRIVALS = ("poisson", "constant")
FIRST_STARTS = ("spread", "together")
#: the load generator's HTTP client: ``loadtests.transport.http1`` or httpx
HTTP_CLIENTS = ("http1", "httpx")
#: defaults of ``--max-event-bytes`` and ``--max-body-bytes`` (``loadtests.measure.caps``)
MAX_EVENT_BYTES = 1 * MIB
MAX_BODY_BYTES = 64 * MIB


#: how a Responses API conversation's later turns are sent (``--responses-chain``)
RESPONSES_CHAINS = ("resend", "previous")


@dataclass(frozen=True)
class Alias:
    """Another tool's name for one of ours (vLLM ``bench serve``, guidellm): flag and plan key."""

    name: str
    to: str
    help: str
    metavar: str | None = None
    type: Callable[[str], Any] | None = None
    nargs: str | None = None


#: theirs -> ours; ``max_concurrency`` without a rate or pacing also means back to back
ALIASES = (
    Alias(
        "max_concurrency",
        "users",
        "vLLM/guidellm name for --users; without --rate/--pacing: back-to-back requests",
        "N",
        int,
    ),
    Alias(
        "goodput",
        "slo",
        "vLLM-style SLOs, e.g. ttft:600 tpot:50 e2el:5000 (same as --slo)",
        "KEY:MS",
        nargs="+",
    ),
)


#: what a difference in an option between two runs does to their comparison (the gate's
#: fingerprint, ``reports.gate.fingerprint``, is read from these and nothing else)
BLOCKS = "blocks"  # can move the metrics alone: the gate refuses unless --allow-difference
NOTED = "noted"  # named beside the verdict, never blocking (how many samples, not what)
IGNORED = "ignored"  # where the files go, how the run is watched: not part of a comparison
COMPARE = (BLOCKS, NOTED, IGNORED)


@dataclass(frozen=True)
class Spec:
    """What ``option()`` declares besides the default (kept in the field's metadata)."""

    help: str
    #: ``BLOCKS``, ``NOTED`` or ``IGNORED``: what a difference does to a comparison
    compare: str = ""
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    #: further flags for the same option (``--request-rate`` for ``--rate``)
    aliases: tuple[str, ...] = ()
    #: a plan or flag value -> the field's value (durations, lists, fractions)
    parse: Callable[[Any], Any] | None = None
    #: a predicate on the parsed value and what it says when it fails
    check: tuple[Callable[[Any], bool], str] | None = None
    #: ``--no-<name>`` sets False (``--no-report``)
    negate: bool = False
    #: the flag may be repeated (``--header``)
    repeat: bool = False
    #: shown in the docs table instead of the default value
    shown: str | None = None
    #: argparse's nargs (``--dataset trace FILE``: one or two words)
    nargs: str | None = None


def option(default: Any, help: str, *, compare: str, **spec: Any) -> Any:
    """A field of an options group, declared once: default, help, flag details, check, and
    what a difference in it does to a comparison of two runs (``compare``)."""
    if compare not in COMPARE:
        raise TypeError(f"option {help!r}: compare must be one of {COMPARE}, got {compare!r}")
    spec["compare"] = compare
    if spec.get("parse") is _duration:
        spec.setdefault("metavar", "D")
    meta = {"spec": Spec(help, **spec)}
    if isinstance(default, list):
        items = list(default)
        return field(default_factory=lambda: list(items), metadata=meta)
    return field(default=default, metadata=meta)


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def _duration(value: Any) -> float:
    return parse_duration(value)


def _maybe_duration(value: Any) -> float | None:
    return None if value is None else parse_duration(value)


#: ``--warmup auto``: the transient found in the data (``reports.table.steady``), not a fixed phase
AUTO = "auto"


def _warmup(value: Any) -> float | str:
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"{exc}, or auto") from None


def warmup_seconds(opts: LoadOptions) -> float:
    """The fixed warm-up phase's length (0 with ``--warmup auto``: there is none)."""
    return 0.0 if opts.warmup == AUTO else float(opts.warmup)


def _size(value: Any) -> int:
    return parse_size(value)


def _fraction(value: Any) -> float | None:
    return None if value is None else parse_fraction(value)


def _json_object(value: Any) -> dict[str, Any] | None:
    """``--extra-body``: a JSON object (a plan may give a table)."""
    if value is None or isinstance(value, dict):
        return value
    try:
        obj = json.loads(value)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"must be a JSON object, got {type(obj).__name__}")
    return obj


def _positive(v: float) -> bool:
    return v > 0


def _at_least_1(v: int | None) -> bool:
    return v is None or v >= 1


def _check_slo(value: str | None) -> bool:
    if value is not None:
        parse_slo(value)  # raises with its own message
    return True


def _check_headers(headers: list[str]) -> bool:
    for h in headers:
        if ":" not in h:
            # never echo the rest: a header missing its colon still carries the secret
            name = h.split(None, 1)[0] if h.strip() else h
            raise ValueError(f"--header expects NAME:VALUE, got {name!r} and no ':'")
    return True


#: ``--dataset trace FILE`` is kept as ``trace:FILE``
TRACE = "trace:"
#: ``--dataset prefix``: groups of prompts sharing a prefix
PREFIX = "prefix"
#: ``--dataset agent``: sessions of tool calls and their results
AGENT = "agent"


def trace_file(dataset: str | None) -> str | None:
    """The trace file of ``--dataset trace FILE``, else None."""
    return dataset[len(TRACE) :] if dataset and dataset.startswith(TRACE) else None


def _dataset(value: Any) -> str | None:
    """``--dataset`` as given (a word, or ``trace FILE``; a plan's string or list) -> a string."""
    if value is None:
        return None
    words = [value] if isinstance(value, str) else [str(v) for v in value]
    if words == ["trace"]:
        raise ValueError("trace needs the trace's file: --dataset trace FILE")
    if len(words) == 1:
        return words[0]
    if len(words) == 2 and words[0] == "trace":
        return TRACE + words[1]
    raise ValueError(f"expected FILE, random or 'trace FILE', got {' '.join(words)!r}")


def _check_span(spec: str | None) -> bool:
    if spec is not None:
        try:
            parse_span(spec)
        except ValueError as exc:
            raise ValueError(f"--trace-window: {exc}") from None
    return True


#: an image side longer than this is refused (a 4096×4096 RGB image is 48 MiB per request)
MAX_IMAGE_SIDE = 4096
#: nor shorter than this (an image holds a 32-byte stamp that makes every image distinct)
MIN_IMAGE_SIDE = 8


def parse_image_counts(text: str) -> tuple[int, ...]:
    """``--images``: ``N`` or ``A,B,C`` (each >= 0, at least one > 0)."""
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"--images {text!r}: give a count (2) or counts (0,1,4)") from None
    if not counts or min(counts) < 0 or max(counts) == 0:
        raise ValueError(f"--images {text!r}: counts are >= 0 and one of them > 0")
    return counts


def parse_image_size(text: str) -> tuple[int, int]:
    """``--image-size``: ``WxH`` in pixels, each side ``MIN_IMAGE_SIDE`` to ``MAX_IMAGE_SIDE``."""
    w, sep, h = text.lower().partition("x")
    if not sep or not w.strip().isdigit() or not h.strip().isdigit():
        raise ValueError(f"--image-size {text!r}: give WxH, e.g. 512x512")
    size = int(w), int(h)
    if not all(MIN_IMAGE_SIDE <= side <= MAX_IMAGE_SIDE for side in size):
        msg = f"each side from {MIN_IMAGE_SIDE} to {MAX_IMAGE_SIDE} pixels"
        raise ValueError(f"--image-size {text!r}: {msg}")
    return size


def _image_counts(value: str | None) -> bool:
    if value is not None:
        parse_image_counts(value)
    return True


def _image_size(value: str) -> bool:
    parse_image_size(value)
    return True


def _http_client(value: Any) -> str:
    """``--http-client``: ``lean``, the http1 client's name before, still reads as http1."""
    return "http1" if value == "lean" else str(value)


def _check_modes(modes: list[str]) -> bool:
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"--modes must be a comma list of {'/'.join(MODES)}, got {bad or '[]'}")
    return True


@dataclass(frozen=True)
class ConnectionOptions:
    """Which target, and how to talk to it."""

    # which target is the model id and server version (facts of the run); the URL's port
    # changes with every bundled server
    target: str = option(
        "",
        "base URL, path prefix kept (e.g. https://host/llm)",
        shown="required for run",
        compare=IGNORED,
    )
    model: str = option("", "model name", shown="first of the target's /v1/models", compare=BLOCKS)
    protocol: str = option(
        "openai-chat",
        "protocol adapter: openai-chat, openai-completions, openai-responses, "
        "anthropic-messages, gradio, tgi",
        compare=BLOCKS,
    )
    api_name: str | None = option(
        None, "--protocol gradio: the fn's endpoint (default: the app's)", compare=BLOCKS
    )
    responses_chain: str = option(
        "resend",
        "--protocol openai-responses: a later turn resends the history, or sends only "
        "itself with previous_response_id (the server keeps the rest)",
        choices=RESPONSES_CHAINS,
        compare=BLOCKS,
    )
    api_key_env: str | None = option(
        None,
        "send $VAR as 'Authorization: Bearer' (never written anywhere)",
        metavar="VAR",
        compare=IGNORED,
    )
    header: list[str] = option(
        [],
        "extra request header (repeatable)",
        metavar="K:V",
        repeat=True,
        parse=_as_list,
        check=(_check_headers, ""),
        compare=NOTED,
    )
    ca_bundle: str | None = option(
        None, "CA bundle for TLS verification", metavar="PEM", compare=IGNORED
    )
    insecure: bool = option(False, "skip TLS verification", compare=IGNORED)
    request_timeout: float = option(
        300.0,
        "whole-request limit -> 'timeout'",
        parse=_duration,
        check=(_positive, "must be positive"),
        shown="300s",
        compare=NOTED,
    )
    stall_timeout: float = option(
        60.0,
        "streaming: no bytes this long -> 'stall'",
        parse=_duration,
        check=(_positive, "must be positive"),
        shown="60s",
        compare=NOTED,
    )
    # the client's own cost is a part of each figure, but ~1 ms: named, not blocking
    http_client: str = option(
        "http1",
        "http1: our own HTTP/1.1 client, one socket per user, read directly; httpx: the "
        "general client (the old name lean is read as http1)",
        choices=HTTP_CLIENTS,
        parse=_http_client,
        compare=NOTED,
    )
    baseline_target: str | None = option(
        None,
        "a second target, run in turn with --target phase by phase (A/B, B/A, A/B… with "
        "--repeat), "
        "so machine drift hits both alike; `report gate RUN` then compares the two, pair by "
        "pair with --repeat 2 or more",
        metavar="URL",
        compare=NOTED,
    )
    max_event_bytes: int = option(
        MAX_EVENT_BYTES,
        "one SSE event may hold this much before its end; past it -> 'protocol'",
        parse=_size,
        metavar="SIZE",
        shown="1MiB",
        check=(_positive, "must be positive"),
        compare=NOTED,
    )
    max_body_bytes: int = option(
        MAX_BODY_BYTES,
        "one response body (decoded) may hold this much; past it -> 'protocol'",
        parse=_size,
        metavar="SIZE",
        shown="64MiB",
        check=(_positive, "must be positive"),
        compare=NOTED,
    )

    def headers_dict(self) -> dict[str, str]:
        """``--header K:V`` values as a dict (values verbatim; never logged)."""
        out: dict[str, str] = {}
        for h in self.header:
            k, _, v = h.partition(":")
            out[k.strip()] = v.strip()
        return out


@dataclass(frozen=True)
class LoadOptions:
    """How many users, how they arrive, which phases, for how long."""

    users: int = option(
        20,
        "closed loop: users; open loop: the concurrency cap",
        check=(_at_least_1, "must be >= 1"),
        compare=BLOCKS,
    )
    spawn_rate: float = option(
        20.0, "users started per second", check=(_positive, "must be > 0"), compare=BLOCKS
    )
    pacing: float = option(
        3.0,
        "start-to-start interval per user, 0s = back-to-back",
        parse=_duration,
        shown="3s",
        check=(lambda v: v >= 0, "must be >= 0"),
        compare=BLOCKS,
    )
    duration: float = option(
        60.0,
        "length of each measured phase",
        parse=_duration,
        shown="60s",
        check=(_positive, "must be positive"),
        compare=NOTED,
    )
    num_prompts: int | None = option(
        None,
        "end each measured phase after N requests (then --duration, if given, bounds it)",
        metavar="N",
        check=(_at_least_1, "must be >= 1"),
        shown="by duration",
        compare=NOTED,
    )
    rate: float | None = option(
        None,
        "open loop: requests per second over all users (vLLM: --request-rate)",
        aliases=("--request-rate",),
        check=(lambda v: v is None or v > 0, "must be positive"),
        shown="closed loop",
        compare=BLOCKS,
    )
    arrival: str = option("poisson", "open-loop arrivals", choices=ARRIVALS, compare=BLOCKS)
    first_start: str = option(
        "spread",
        "closed loop: each user's first request at a seeded point of one --pacing interval, "
        "a spawn batch's users in equal slots of it (back to back: of the second the batch "
        "fills), or all together as spawned (lock-step bursts)",
        choices=FIRST_STARTS,
        compare=BLOCKS,
    )
    shape: str | dict[str, Any] | None = option(
        None,
        "steps:start=5,step=5,every=30s | spike:base=10,peak=100,...",
        shown="constant",
        compare=BLOCKS,
    )
    modes: list[str] = option(
        list(MODES),
        "phases to run, in order",
        parse=_as_list,
        check=(_check_modes, ""),
        compare=BLOCKS,
    )
    warmup: float | str = option(
        0.0,
        "warm-up phase length (recorded, excluded from the statistics); auto: no warm-up "
        "phase, each measured phase's transient found in the data (MSER-5) and left out",
        parse=_warmup,
        metavar="D|auto",
        shown="0s",
        compare=NOTED,
    )
    cooldown: float = option(
        0.0, "pause between measured phases", parse=_duration, shown="0s", compare=NOTED
    )
    repeat: int = option(
        1,
        "run each measured phase N times (interleaved with --baseline-target: A/B, B/A, …, and "
        "the gate judges the pairs); the gate counts each as a run and reports the spread "
        "between them",
        metavar="N",
        check=(_at_least_1, "must be >= 1"),
        compare=NOTED,
    )
    drain_timeout: float = option(
        10.0,
        "at a phase's end, requests in flight get this long to finish, then end as "
        "'disconnect' (cancelled by the client)",
        parse=_duration,
        shown="10s",
        compare=NOTED,
    )
    #: fixes prompt choice and order, and open-loop arrivals and first starts
    # another draw of the same prompts and arrivals: sampling, which the gate's interval covers
    seed: int = option(0, "seed for prompt choice, arrivals and first starts", compare=NOTED)


@dataclass(frozen=True)
class WorkloadOptions:
    """What each request asks for."""

    scenario: str = option(
        "mix", "mix, short_qa, code_gen, long_summary, or weights a:5,b:1", compare=BLOCKS
    )
    dataset: str | None = option(
        None,
        "JSONL prompts (messages or prompt), ShareGPT JSON, 'random' (exact lengths), "
        "'prefix' (groups sharing a prefix), 'agent' (tool-calling sessions), or 'trace FILE' "
        "(Mooncake JSONL, BurstGPT or Azure CSV, replayed at its times)",
        metavar="FILE|random|prefix|agent|trace FILE",
        nargs="+",
        parse=_dataset,
        compare=BLOCKS,
    )
    input_len: int | None = option(
        None,
        "--dataset random: prompt tokens",
        check=(_at_least_1, "must be >= 1"),
        shown="1024",
        compare=BLOCKS,
    )
    output_len: int | None = option(
        None,
        "--dataset random/prefix/ShareGPT: output tokens",
        check=(_at_least_1, "must be >= 1"),
        shown="random, prefix: 128",
        compare=BLOCKS,
    )
    range_ratio: float = option(
        0.0,
        "--dataset random: lengths uniform in len*(1+-r)",
        check=(lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
        compare=BLOCKS,
    )
    prefix_groups: int | None = option(
        None,
        "--dataset prefix: groups, each with its own shared prefix",
        check=(_at_least_1, "must be >= 1"),
        shown="10",
        compare=BLOCKS,
    )
    prefix_len: int | None = option(
        None,
        "--dataset prefix: tokens of each group's shared prefix",
        check=(_at_least_1, "must be >= 1"),
        shown="256",
        compare=BLOCKS,
    )
    suffix_len: int | None = option(
        None,
        "--dataset prefix: tokens of each request's own suffix",
        check=(_at_least_1, "must be >= 1"),
        shown="256",
        compare=BLOCKS,
    )
    prefix_skew: float = option(
        0.0,
        "--dataset prefix: Zipf exponent of the group draw (0 = uniform)",
        metavar="S",
        check=(lambda v: v >= 0, "must be >= 0"),
        compare=BLOCKS,
    )
    agent_steps: int | None = option(
        None,
        "--dataset agent: model calls per session (tool calls, then the final answer)",
        check=(_at_least_1, "must be >= 1"),
        shown="4",
        compare=BLOCKS,
    )
    tool_result_tokens: int | None = option(
        None,
        "--dataset agent: tokens of each tool result sent back",
        check=(_at_least_1, "must be >= 1"),
        shown="256",
        compare=BLOCKS,
    )
    think_time: float | None = option(
        None,
        "--dataset agent: wait between a tool call and its result (the tool running)",
        parse=_maybe_duration,
        metavar="D",
        shown="0s",
        compare=BLOCKS,
    )
    speedup: float = option(
        1.0,
        "--dataset trace: replay X times as fast (llmload capacity --speedup searches it)",
        metavar="X",
        check=(_positive, "must be > 0"),
        compare=BLOCKS,
    )
    trace_window: str | None = option(
        None,
        "--dataset trace: replay only this part of the trace (its seconds; 60:120, 1m:, :30s)",
        metavar="START:END",
        check=(_check_span, ""),
        shown="whole trace",
        compare=BLOCKS,
    )
    batch_size: int = option(
        1,
        "--protocol openai-embeddings: inputs per request; rerank: documents per request",
        check=(_at_least_1, "must be >= 1"),
        compare=BLOCKS,
    )
    images: str | None = option(
        None,
        "images per request: N, or counts drawn per request (0,1,4); generated PNGs, each "
        "distinct (chat, Responses, Messages APIs)",
        metavar="N|A,B,...",
        check=(_image_counts, ""),
        compare=BLOCKS,
    )
    image_size: str = option(
        "512x512",
        "--images: each image's size in pixels",
        metavar="WxH",
        check=(_image_size, ""),
        compare=BLOCKS,
    )
    image_url: str | None = option(
        None,
        "--images: send this URL instead of generated images (the server fetches it)",
        metavar="URL",
        compare=BLOCKS,
    )
    max_tokens: int | None = option(
        None, "override every prompt's max_tokens", shown="per scenario", compare=BLOCKS
    )
    turns: int = option(
        1, "turns per conversation", check=(_at_least_1, "must be >= 1"), compare=BLOCKS
    )
    temperature: float | None = option(
        None, "sampling temperature sent", shown="server's", compare=BLOCKS
    )
    ignore_eos: bool = option(False, "ask for max_tokens (ignore_eos)", compare=BLOCKS)
    extra_body: dict[str, Any] | None = option(
        None,
        "JSON object merged into every OpenAI request body (tools, chat_template_kwargs, ...)",
        metavar="JSON",
        parse=_json_object,
        compare=BLOCKS,
    )
    tokenizer: str | None = option(
        None,
        "the target's tokenizer: counts output tokens, builds random/ShareGPT lengths",
        metavar="PATH",
        compare=BLOCKS,
    )


@dataclass(frozen=True)
class OutputOptions:
    """Where the run goes: files, report, live exporter, Grafana, web UI, status line."""

    out: str | None = option(
        None, "run directory", metavar="DIR", shown="runs/<UTC>-<label>/", compare=IGNORED
    )
    label: str = option("", "run label", shown="run", compare=IGNORED)
    report: bool = option(
        True,
        "summary.json, summary.md and report.html at the end (`report build` later)",
        negate=True,
        compare=IGNORED,
    )
    records_compression: str = option(
        "none",
        "requests.jsonl compressed as written: .jsonl.gz or .jsonl.zst (`report build` reads "
        "all three)",
        choices=COMPRESSIONS,
        compare=IGNORED,
    )
    # the gate counts goodput with the baseline's SLO, whatever the run's says
    slo: str | None = option(
        None,
        "goodput SLOs: ttft=600ms,tpot=50ms,e2e=5s",
        check=(_check_slo, ""),
        compare=IGNORED,
    )
    max_error_rate: float | None = option(
        None,
        "exit 3 when more than this share of measured requests failed, e.g. 5%%",
        metavar="FRACTION",
        parse=_fraction,
        shown="only when all failed",
        compare=IGNORED,
    )
    status_interval: float = option(
        1.0, "status line period", parse=_duration, shown="1s", compare=IGNORED
    )
    metrics_port: int | None = option(
        None, "serve client metrics on this port (0: any)", shown="off", compare=IGNORED
    )
    metrics_host: str = option("127.0.0.1", "interface for --metrics-port", compare=IGNORED)
    pushgateway: str | None = option(
        None, "push client metrics at the end", metavar="URL", compare=IGNORED
    )
    grafana_url: str | None = option(
        None, "annotate phases (token: $GRAFANA_TOKEN)", metavar="URL", compare=IGNORED
    )
    server_metrics: str = option(
        "auto",
        "scrape the target's Prometheus metrics into server_metrics.jsonl: auto (its own "
        "/metrics, when that answers with Prometheus text), a URL, or off",
        metavar="URL|auto|off",
        compare=NOTED,
    )
    server_metrics_interval: float = option(
        1.0,
        "--server-metrics period",
        parse=_duration,
        shown="1s",
        check=(_positive, "must be positive"),
        compare=NOTED,
    )
    server_metrics_family: list[str] = option(
        [],
        "also keep this family of the server's metrics (repeatable)",
        metavar="NAME",
        repeat=True,
        parse=_as_list,
        compare=IGNORED,
    )
    gpu_metrics: str = option(
        "auto",
        "scrape a GPU exporter (NVIDIA dcgm-exporter, AMD device metrics exporter) into "
        "gpu_metrics.jsonl beside --server-metrics, on its clock and period: auto (the "
        "target host's dcgm-exporter port 9400 when it answers, else the target's own "
        "metrics when they hold GPU families, as the bundled server's on CUDA do), a URL, "
        "nvml (this host's GPUs through nvidia-ml-py), or off",
        metavar="URL|auto|nvml|off",
        compare=NOTED,
    )
    web: bool = option(False, "serve locust's web UI, with the llmload tabs", compare=IGNORED)
    web_host: str = option("127.0.0.1", "web UI interface", compare=IGNORED)
    web_port: int = option(8089, "web UI port", compare=IGNORED)


@dataclass(frozen=True)
class DistributedOptions:
    """Master/worker mode."""

    # the client's capacity, not the target's load: the trust box judges it
    workers: int = option(
        0,
        "spawn N local locust worker processes",
        metavar="N",
        check=(lambda v: v >= 0, "must be >= 0"),
        shown="local",
        compare=NOTED,
    )
    master: bool = option(False, "be a master for --worker processes", compare=NOTED)
    worker: bool = option(False, "be a worker of --master-host", compare=IGNORED)
    master_host: str = option(
        "127.0.0.1", "master address (workers) / bind address (master)", compare=IGNORED
    )
    master_port: int = option(5557, "master port", compare=IGNORED)
    expect_workers: int = option(1, "--master: wait for N workers", metavar="N", compare=NOTED)

    @property
    def enabled(self) -> bool:
        """The run's users are on locust workers (spawned here, or connecting to us)."""
        return self.workers > 0 or self.master

    @property
    def expected(self) -> int:
        """How many workers the master waits for."""
        return self.workers or self.expect_workers


#: group name (the ``RunOptions`` field) -> its dataclass, in --help order
GROUPS: dict[str, type] = {
    "connection": ConnectionOptions,
    "load": LoadOptions,
    "workload": WorkloadOptions,
    "output": OutputOptions,
    "distributed": DistributedOptions,
}


@dataclass(frozen=True)
class Declared:
    """One option as declared: its group, field and spec, and the type its annotation names."""

    group: str
    field: Field[Any]
    spec: Spec
    kind: type

    @property
    def name(self) -> str:
        return self.field.name

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def default(self) -> Any:
        if self.field.default_factory is not MISSING:
            return self.field.default_factory()
        return self.field.default


def _kind(annotation: Any) -> type:
    """The scalar type an annotation names (``int | None`` -> int; lists -> list)."""
    origin = typing.get_origin(annotation)
    if origin is list:
        return list
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if args and origin is not None:
        return _kind(args[0])
    return annotation if isinstance(annotation, type) else str


def declared() -> Iterator[Declared]:
    """Every option, in --help order."""
    for group, cls in GROUPS.items():
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            yield Declared(group, f, f.metadata["spec"], _kind(hints[f.name]))


DECLARED = {d.name: d for d in declared()}
_ALIASES = {a.name: a for a in ALIASES}


def _second_names() -> dict[str, str]:
    """A declaration's further flags as plan keys (``request_rate`` -> ``rate``)."""
    return {
        flag.lstrip("-").replace("-", "_"): d.name
        for d in DECLARED.values()
        for flag in d.spec.aliases
    }


@dataclass(frozen=True)
class RunOptions:
    """Everything a run needs, in five frozen groups (``validate()`` normalises and checks).

    ``config()`` is what ``run.json`` records (flat names, secrets redacted).
    """

    connection: ConnectionOptions = field(default_factory=ConnectionOptions)
    load: LoadOptions = field(default_factory=LoadOptions)
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    output: OutputOptions = field(default_factory=OutputOptions)
    distributed: DistributedOptions = field(default_factory=DistributedOptions)

    @classmethod
    def of(cls, **flat: Any) -> RunOptions:
        """Options from flat names (``RunOptions.of(users=5, target=...)``), not validated."""
        return cls().with_(**flat)

    def with_(self, **flat: Any) -> RunOptions:
        """A copy with some options replaced, by flat name, in whichever group they live."""
        by_group: dict[str, dict[str, Any]] = {}
        for name, value in flat.items():
            if name not in DECLARED:
                raise TypeError(f"unknown run option {name!r}")
            by_group.setdefault(DECLARED[name].group, {})[name] = value
        return replace(
            self,
            **{g: replace(getattr(self, g), **values) for g, values in by_group.items()},
        )

    def flat(self) -> dict[str, Any]:
        """Every option by flat name (what ``run.json`` and a worker's setup carry)."""
        out: dict[str, Any] = {}
        for group in GROUPS:
            out.update(asdict(getattr(self, group)))
        return out

    def validate(self) -> RunOptions:
        """The normalised value, checked; raises ``ValueError`` with a one-line message."""
        changes: dict[str, Any] = {}
        values = self.flat()
        for name, d in DECLARED.items():
            value = values[name]
            if d.spec.parse is not None:
                try:
                    value = d.spec.parse(value)
                except ValueError as exc:
                    raise ValueError(f"{d.flag}: {exc}") from None
                changes[name] = value
            if d.spec.choices and value not in d.spec.choices:
                raise ValueError(f"{d.flag} must be one of {', '.join(d.spec.choices)}")
            if d.spec.check is not None:
                ok, must = d.spec.check
                if not ok(value):
                    raise ValueError(f"{d.flag} {must}, got {value!r}")
        norm = self.with_(**changes)
        norm._relations()
        return norm

    def _relations(self) -> None:
        """The checks that relate several options."""
        load, work, dist = self.load, self.workload, self.distributed
        if load.rate is not None and (work.turns > 1 or load.shape):
            raise ValueError("--rate (open loop) cannot be combined with --turns > 1 or --shape")
        shards = dist.expected if dist.enabled else 1
        if self.connection.baseline_target and dist.enabled:
            raise ValueError("--baseline-target runs in one process (no --workers/--master)")
        if self.connection.baseline_target and (
            self.connection.baseline_target == self.connection.target
        ):
            raise ValueError("--baseline-target must be another target than --target")
        if load.num_prompts is not None and load.users < shards:
            # each worker issues its share of the prompts with its own users: a worker
            # given none would hold its share back and the phase would never end
            raise ValueError(
                f"--num-prompts with {shards} workers needs --users (--max-concurrency) "
                f">= {shards}, got {load.users}"
            )
        if work.dataset != "random" and (work.input_len is not None or work.range_ratio):
            raise ValueError("--input-len and --range-ratio need --dataset random")
        if work.output_len is not None and not work.dataset:
            raise ValueError("--output-len needs --dataset random, prefix or a ShareGPT file")
        if work.dataset in ("random", PREFIX) and work.max_tokens is not None:
            raise ValueError(f"--dataset {work.dataset}: give output lengths with --output-len")
        if work.extra_body and self.connection.protocol in ("gradio", "tgi"):
            raise ValueError("--extra-body goes with the JSON APIs, not --protocol gradio or tgi")
        if work.images is None and (work.image_url or work.image_size != "512x512"):
            raise ValueError("--image-size and --image-url need --images")
        chain = self.connection.responses_chain
        if chain != "resend" and self.connection.protocol != "openai-responses":
            raise ValueError(f"--responses-chain {chain} needs --protocol openai-responses")
        prefix_given = (work.prefix_groups, work.prefix_len, work.suffix_len)
        if work.dataset != PREFIX and (
            any(v is not None for v in prefix_given) or work.prefix_skew
        ):
            raise ValueError(
                "--prefix-groups, --prefix-len, --suffix-len, --prefix-skew need --dataset prefix"
            )
        self._trace_relations()
        self._agent_relations()

    def _agent_relations(self) -> None:
        """``--dataset agent``: sessions on the chat endpoint, their length set by the steps."""
        work = self.workload
        agent = (work.agent_steps, work.tool_result_tokens, work.think_time)
        if work.dataset != AGENT:
            if any(v is not None for v in agent):
                raise ValueError(
                    "--agent-steps, --tool-result-tokens and --think-time need --dataset agent"
                )
            return
        if self.connection.protocol != "openai-chat":
            raise ValueError("--dataset agent sends tools: it needs --protocol openai-chat")
        if work.turns > 1 or self.load.num_prompts is not None or self.load.shape:
            raise ValueError(
                "--dataset agent runs sessions of --agent-steps requests: --turns, "
                "--num-prompts and --shape do not apply (use --duration, --users or --rate)"
            )

    def _trace_relations(self) -> None:
        """``--dataset trace FILE``: the trace sets the times and the lengths."""
        load, work = self.load, self.workload
        if not trace_file(work.dataset):
            if work.speedup != 1.0 or work.trace_window is not None:
                raise ValueError("--speedup and --trace-window need --dataset trace FILE")
            return
        given = [
            flag
            for flag, value in (
                ("--rate", load.rate is not None),
                ("--shape", bool(load.shape)),
                ("--turns", work.turns > 1),
                ("--max-tokens", work.max_tokens is not None),
                ("--output-len", work.output_len is not None),
            )
            if value
        ]
        if given:
            raise ValueError(
                f"--dataset trace sends the trace's requests at its times with its lengths: "
                f"{', '.join(given)} cannot be combined with it (--speedup changes the pace)"
            )

    def config(self) -> dict[str, Any]:
        """All options for ``run.json``: secrets redacted, the API key never present."""
        data = self.flat()
        if math.isinf(self.load.duration):
            data["duration"] = None  # --num-prompts without a time limit (JSON has no inf)
        data["target"] = redact_url(self.connection.target)
        if data["baseline_target"]:
            data["baseline_target"] = redact_url(data["baseline_target"])
        data["header"] = [redact_header(h) for h in self.connection.header]
        for key in ("pushgateway", "grafana_url", "server_metrics", "gpu_metrics"):
            if data[key]:
                data[key] = redact_url(data[key])
        data["extra_body"] = redact_value(data["extra_body"])
        return data


def load_plan(path: str | Path) -> dict[str, Any]:
    """Read a TOML plan into option names (``spawn-rate`` -> ``spawn_rate``)."""
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in DECLARED and name not in _ALIASES and name not in _second_names():
            raise ValueError(f"{path}: unknown plan key {key!r}")
        out[name] = value
    return out


def _canonical(given: dict[str, Any]) -> dict[str, Any]:
    """Alias names (``request_rate``, ``max_concurrency``, ``goodput``) -> ours."""
    out = dict(given)
    flag = lambda n: "--" + n.replace("_", "-")  # noqa: E731 - a one-line helper local to this function
    for second, name in _second_names().items():
        if second in out:
            if name in out:
                raise ValueError(f"give {flag(name)} or {flag(second)}, not both")
            out[name] = out.pop(second)
    for alias in ALIASES:
        if alias.name not in out:
            continue
        if alias.to in out:
            raise ValueError(f"give {flag(alias.to)} or {flag(alias.name)}, not both")
        value = out.pop(alias.name)
        if alias.nargs and not isinstance(value, str):
            value = " ".join(str(v) for v in value)  # ["ttft:600", "tpot:50"] (nargs="+")
        out[alias.to] = value
    return out


def build_options(plan: dict[str, Any], cli: dict[str, Any]) -> RunOptions:
    """Defaults, then the plan, then flags given on the command line; validated.

    Field vocabulary: ``max_concurrency`` is ``users`` and, with no ``rate`` and no
    ``pacing`` given, means back-to-back requests (pacing 0) as in vLLM and guidellm;
    ``num_prompts`` without a ``duration`` leaves the phases without a time limit.
    """
    known = set(DECLARED) | set(_ALIASES) | set(_second_names())
    cli = {k: v for k, v in cli.items() if k in known}
    concurrency = "max_concurrency" in plan or "max_concurrency" in cli
    plan, cli = _canonical(plan), _canonical(cli)
    merged = {**plan, **cli}
    if "header" in plan and "header" in cli:
        merged["header"] = _as_list(plan["header"]) + list(cli["header"])
    if concurrency and "pacing" not in merged and merged.get("rate") is None:
        merged["pacing"] = 0.0
    if merged.get("num_prompts") is not None and "duration" not in merged:
        merged["duration"] = math.inf
    try:
        replay = trace_file(_dataset(merged.get("dataset")))
    except ValueError:
        replay = None  # validate() says what is wrong with it
    if replay and "duration" not in merged:
        merged["duration"] = math.inf  # a replay's phase ends with the trace's last record
    return RunOptions.of(**merged).validate()


def is_unset(value: Any) -> bool:
    """A default that means "not given" (nothing to show as a default)."""
    return value is None or value is False or value == "" or value == []


def _row(*cells: str) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def options_table() -> str:
    """The Markdown table of every ``run`` option (docs/loadgen.md holds a copy; a test checks)."""
    rows = ["| option | default | a difference | meaning |", "|---|---|---|---|"]
    for d in DECLARED.values():
        value = ""
        if d.kind is not bool:
            value = " " + (
                "|".join(d.spec.choices)
                if d.spec.choices
                else d.spec.metavar or ("N" if d.kind is int else d.name.upper())
            )
        flags = ", ".join(f"`{f}{value}`" for f in (d.flag, *d.spec.aliases))
        if d.spec.negate:
            flags = f"`--no-{d.name.replace('_', '-')}`"
        shown = d.spec.shown
        if shown is None:
            default = d.default
            if d.spec.negate:
                shown = "on"
            elif isinstance(default, list):
                shown = f"`{','.join(default)}`" if default else "none"
            else:
                shown = "off" if is_unset(default) else f"`{default}`"
        compare = "" if d.spec.compare == IGNORED else d.spec.compare
        rows.append(_row(flags, shown, compare, d.spec.help.replace("%%", "%")))
    for a in ALIASES:
        rows.append(_row(f"`--{a.name.replace('_', '-')} {a.metavar}`", "", "", a.help))
    return "\n".join(rows) + "\n"
