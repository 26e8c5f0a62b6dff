"""Run options: defaults, a TOML test plan (``--plan``), command-line overrides, validation.

Precedence: built-in defaults < plan file < command line.  A plan uses the long
flag names as keys (``spawn-rate`` or ``spawn_rate``), durations as strings
(``"3s"``, ``"5m"``) or seconds, lists or comma strings for ``modes``/``header``,
and an optional ``[shape]`` table (``kind = "steps"``, ``start = 5``, ...).

The shape of the options (read this before adding one):

* ``RunOptions`` is one flat, *frozen* record with a field per flag and plan
  key (the CLI and TOML map onto it 1:1).  ``validate()`` returns a new,
  normalised value (durations in seconds, lists split, fractions parsed) and
  never changes the one it is called on; change a value with
  ``dataclasses.replace``.
* Every field belongs to exactly one group (``GROUPS``): ``connection`` (which
  target and how to talk to it), ``load`` (users, shape, phases), ``workload``
  (prompts and sampling), ``output`` (run files, report, live sinks) and
  ``distributed`` (master/worker).  ``opts.connection``, ``opts.load``, ... are
  frozen views of those fields; a layer that needs one part takes that view
  (``Target`` takes ``ConnectionOptions``, the workload builder
  ``WorkloadOptions``, the sinks ``OutputOptions``).
* Adding an option: a field on ``RunOptions`` (with its default), the same
  field on its group's dataclass, its name in ``GROUPS``, its flag in
  ``loadtests/run/cli.py``, its check in ``validate()``.  ``tests/unit/test_plan.py``
  fails when a field is in no group or in two.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from llmload.loadtests.durations import parse_duration, parse_fraction
from llmload.loadtests.redact import redact_header, redact_url
from llmload.loadtests.slo import parse_slo

MODES = ("sync", "stream")
#: the field's names (vLLM ``bench serve``, guidellm) for ours; plan keys and flags alike
ALIASES = {"request_rate": "rate", "max_concurrency": "users", "goodput": "slo"}
ARRIVALS = ("poisson", "constant")
FIRST_STARTS = ("spread", "together")
#: the load generator's HTTP client: ``loadtests.transport.http1`` or httpx
#: (``loadtests.transport.target``)
HTTP_CLIENTS = ("lean", "httpx")
#: fields given as durations (``"3s"``), seconds after ``validate()``
DURATIONS = (
    "pacing",
    "duration",
    "warmup",
    "cooldown",
    "request_timeout",
    "stall_timeout",
    "status_interval",
)


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


@dataclass(frozen=True)
class ConnectionOptions:
    """Which target, and how to talk to it."""

    target: str
    model: str
    protocol: str
    api_name: str | None
    api_key_env: str | None
    header: list[str]
    ca_bundle: str | None
    insecure: bool
    request_timeout: float
    stall_timeout: float
    http_client: str

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

    users: int
    spawn_rate: float
    pacing: float
    duration: float
    num_prompts: int | None
    rate: float | None
    arrival: str
    shape: str | dict[str, Any] | None
    modes: list[str]
    warmup: float
    cooldown: float
    seed: int
    first_start: str


@dataclass(frozen=True)
class WorkloadOptions:
    """What each request asks for."""

    scenario: str
    dataset: str | None
    input_len: int | None
    output_len: int | None
    range_ratio: float
    max_tokens: int | None
    turns: int
    seed: int
    temperature: float | None
    ignore_eos: bool
    tokenizer: str | None


@dataclass(frozen=True)
class OutputOptions:
    """Where the run goes: files, report, live exporter, Grafana, web UI, status line."""

    out: str | None
    label: str
    metrics_port: int | None
    metrics_host: str
    pushgateway: str | None
    grafana_url: str | None
    web: bool
    web_host: str
    web_port: int
    report: bool
    slo: str | None
    max_error_rate: float | None
    status_interval: float


@dataclass(frozen=True)
class DistributedOptions:
    """Master/worker mode."""

    workers: int
    master: bool
    worker: bool
    master_host: str
    master_port: int
    expect_workers: int

    @property
    def enabled(self) -> bool:
        """The run's users are on locust workers (spawned here, or connecting to us)."""
        return self.workers > 0 or self.master

    @property
    def expected(self) -> int:
        """How many workers the master waits for."""
        return self.workers or self.expect_workers


#: group name -> its dataclass; every RunOptions field is in exactly one (``seed`` is in
#: load and workload: it fixes both the arrivals and the prompts)
GROUPS: dict[str, type] = {
    "connection": ConnectionOptions,
    "load": LoadOptions,
    "workload": WorkloadOptions,
    "output": OutputOptions,
    "distributed": DistributedOptions,
}


def _part(opts: RunOptions, group: type) -> Any:
    return group(**{f.name: getattr(opts, f.name) for f in fields(group)})


@dataclass(frozen=True)
class RunOptions:
    """Everything a run needs (frozen; ``validate()`` returns the normalised value).

    ``config()`` is what ``run.json`` records; ``connection``, ``load``,
    ``workload``, ``output`` and ``distributed`` are the parts each layer takes.
    """

    target: str = ""
    model: str = ""
    protocol: str = "openai-chat"
    api_name: str | None = None
    api_key_env: str | None = None
    header: list[str] = field(default_factory=list)
    ca_bundle: str | None = None
    insecure: bool = False
    users: int = 20
    spawn_rate: float = 20.0
    pacing: float = 3.0
    duration: float = 60.0
    #: stop each measured phase after this many requests (``duration`` then only bounds it)
    num_prompts: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    #: closed loop: each user's first request at a seeded uniform offset inside one pacing
    #: interval (``spread``), or all at once as spawned (``together``: lock-step bursts)
    first_start: str = "spread"
    shape: str | dict[str, Any] | None = None
    modes: list[str] = field(default_factory=lambda: list(MODES))
    warmup: float = 0.0
    cooldown: float = 0.0
    scenario: str = "mix"
    dataset: str | None = None
    #: ``--dataset random``: prompt / output lengths in tokens, +-``range_ratio`` uniform
    input_len: int | None = None
    output_len: int | None = None
    range_ratio: float = 0.0
    max_tokens: int | None = None
    turns: int = 1
    seed: int = 0
    temperature: float | None = None
    ignore_eos: bool = False
    tokenizer: str | None = None
    request_timeout: float = 300.0
    stall_timeout: float = 60.0
    #: ``lean`` (one socket per user, ``loadtests.transport.http1``) or ``httpx``
    #: (the general client)
    http_client: str = "lean"
    out: str | None = None
    label: str = ""
    workers: int = 0
    master: bool = False
    worker: bool = False
    master_host: str = "127.0.0.1"
    master_port: int = 5557
    expect_workers: int = 1
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    pushgateway: str | None = None
    grafana_url: str | None = None
    web: bool = False
    web_host: str = "127.0.0.1"
    web_port: int = 8089
    report: bool = True
    slo: str | None = None
    #: exit 3 when more than this share of measured requests failed (None: only when all did)
    max_error_rate: float | None = None
    status_interval: float = 1.0

    @property
    def connection(self) -> ConnectionOptions:
        """Which target and how to talk to it (``loadtests.transport.target.Target``)."""
        return _part(self, ConnectionOptions)

    @property
    def load(self) -> LoadOptions:
        """Users, arrivals, phases (``loadtests.run.phaseloop``, ``loadtests.run.shapes``)."""
        return _part(self, LoadOptions)

    @property
    def workload(self) -> WorkloadOptions:
        """Prompts and sampling (``loadtests.workload``, the adapters)."""
        return _part(self, WorkloadOptions)

    @property
    def output(self) -> OutputOptions:
        """Run files, report, live sinks (``llmload.run``)."""
        return _part(self, OutputOptions)

    @property
    def distributed(self) -> DistributedOptions:
        """Master/worker mode (``loadtests.run.distributed``)."""
        return _part(self, DistributedOptions)

    def validate(self) -> RunOptions:
        """The normalised value, checked; raises ``ValueError`` with a one-line message."""
        header = _as_list(self.header) if isinstance(self.header, str) else list(self.header)
        changes: dict[str, Any] = {"modes": _as_list(self.modes), "header": header}
        for name in DURATIONS:
            changes[name] = parse_duration(getattr(self, name))
        if self.max_error_rate is not None:
            try:
                changes["max_error_rate"] = parse_fraction(self.max_error_rate)
            except ValueError as exc:
                raise ValueError(f"--max-error-rate: {exc}") from None
        norm = replace(self, **changes)
        norm._check()
        norm._validate_workload()
        return norm

    def _check(self) -> None:
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise ValueError(
                f"--modes must be a comma list of {'/'.join(MODES)}, got {bad or '[]'}"
            )
        if self.arrival not in ARRIVALS:
            raise ValueError(f"--arrival must be one of {', '.join(ARRIVALS)}")
        if self.first_start not in FIRST_STARTS:
            raise ValueError(f"--first-start must be one of {', '.join(FIRST_STARTS)}")
        if self.duration <= 0:
            raise ValueError("--duration must be positive")
        if self.users < 1 or self.spawn_rate <= 0:
            raise ValueError("--users must be >= 1 and --spawn-rate > 0")
        if self.rate is not None and self.rate <= 0:
            raise ValueError("--rate must be positive")
        if self.rate is not None and (self.turns > 1 or self.shape):
            raise ValueError("--rate (open loop) cannot be combined with --turns > 1 or --shape")
        if self.turns < 1:
            raise ValueError("--turns must be >= 1")
        if self.request_timeout <= 0 or self.stall_timeout <= 0:
            raise ValueError("--request-timeout and --stall-timeout must be positive")
        if self.http_client not in HTTP_CLIENTS:
            raise ValueError(f"--http-client must be one of {', '.join(HTTP_CLIENTS)}")
        for h in self.header:
            if ":" not in h:
                # never echo the rest: a header missing its colon still carries the secret
                name = h.split(None, 1)[0] if h.strip() else h
                raise ValueError(f"--header expects NAME:VALUE, got {name!r} and no ':'")
        if self.workers < 0:
            raise ValueError("--workers must be >= 0")
        shards = self.distributed.expected if self.distributed.enabled else 1
        if self.num_prompts is not None and self.users < shards:
            # each worker issues its share of the prompts with its own users: a worker
            # given none would hold its share back and the phase would never end
            raise ValueError(
                f"--num-prompts with {shards} workers needs --users (--max-concurrency) "
                f">= {shards}, got {self.users}"
            )

    def _validate_workload(self) -> None:
        if self.num_prompts is not None and self.num_prompts < 1:
            raise ValueError("--num-prompts must be >= 1")
        for name in ("input_len", "output_len"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
        if not 0.0 <= self.range_ratio < 1.0:
            raise ValueError("--range-ratio must be in [0, 1)")
        if self.dataset != "random" and (self.input_len is not None or self.range_ratio):
            raise ValueError("--input-len and --range-ratio need --dataset random")
        if self.output_len is not None and not self.dataset:
            raise ValueError("--output-len needs --dataset random or a ShareGPT file")
        if self.dataset == "random" and self.max_tokens is not None:
            raise ValueError("--dataset random: give output lengths with --output-len")
        if self.slo is not None:
            parse_slo(self.slo)

    def config(self) -> dict[str, Any]:
        """All options for ``run.json``: secrets redacted, the API key never present."""
        data = asdict(self)
        if math.isinf(self.duration):
            data["duration"] = None  # --num-prompts without a time limit (JSON has no inf)
        data["target"] = redact_url(self.target)
        data["header"] = [redact_header(h) for h in self.header]
        for key in ("pushgateway", "grafana_url"):
            if data[key]:
                data[key] = redact_url(data[key])
        return data


_FIELDS = {f.name for f in fields(RunOptions)}


def load_plan(path: str | Path) -> dict[str, Any]:
    """Read a TOML plan into option names (``spawn-rate`` -> ``spawn_rate``)."""
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in _FIELDS and name not in ALIASES:
            raise ValueError(f"{path}: unknown plan key {key!r}")
        out[name] = value
    return out


def _canonical(given: dict[str, Any]) -> dict[str, Any]:
    """Alias names (``request_rate``, ``max_concurrency``, ``goodput``) -> ours."""
    out = dict(given)
    for alias, name in ALIASES.items():
        if alias not in out:
            continue
        if name in out:
            flag = lambda n: "--" + n.replace("_", "-")  # noqa: E731
            raise ValueError(f"give {flag(name)} or {flag(alias)}, not both")
        value = out.pop(alias)
        if alias == "goodput" and not isinstance(value, str):
            value = " ".join(str(v) for v in value)  # ["ttft:600", "tpot:50"] (nargs="+")
        out[name] = value
    return out


def build_options(plan: dict[str, Any], cli: dict[str, Any]) -> RunOptions:
    """Defaults, then the plan, then flags given on the command line; validated.

    Field vocabulary: ``max_concurrency`` is ``users`` and, with no ``rate`` and no
    ``pacing`` given, means back-to-back requests (pacing 0) as in vLLM and guidellm;
    ``num_prompts`` without a ``duration`` leaves the phases without a time limit.
    """
    cli = {k: v for k, v in cli.items() if k in _FIELDS or k in ALIASES}
    concurrency = "max_concurrency" in plan or "max_concurrency" in cli
    plan, cli = _canonical(plan), _canonical(cli)
    merged = {**plan, **cli}
    if "header" in plan and "header" in cli:
        merged["header"] = _as_list(plan["header"]) + list(cli["header"])
    if concurrency and "pacing" not in merged and merged.get("rate") is None:
        merged["pacing"] = 0.0
    if merged.get("num_prompts") is not None and "duration" not in merged:
        merged["duration"] = math.inf
    return RunOptions(**merged).validate()
