"""Only comparable runs are compared: what shapes the numbers, and what differs between two runs.

``fingerprint(run_json)`` reads, from a run's ``run.json`` (or the ``run`` block
a baseline keeps), everything that decides what the target was asked to do and
which target it was — and, as context, what measured it.  It has no list of its
own: every run option declares, where it is declared (``loadtests.options``,
``compare=``), whether a difference

* **blocks** — alone it can move the metrics, so the gate refuses (inconclusive,
  naming it) unless ``--allow-difference KEY``: the protocol, the load (users or
  rate, arrivals, pacing, shape, modes, ...), the workload (scenario, dataset
  and every one of its lengths, max_tokens, sampling, ...), the tokenizer;
* is **noted** — named, never blocking: the phase length and warm-up, repeats,
  timeouts and limits, the HTTP client, distributed workers;
* or is **ignored** — where the files go and how the run is watched.

Besides the options, a few facts of the run (``FACTS``): the target's model id
and its server version (where the server says one: vLLM's ``/version``, TGI's
``/info``, the bundled server's ``/version``) and the dataset's and prompts'
content hashes block; the llmload version, the load generator's machine and its
calibration are noted.

An option one side does not record (a run from an llmload before the option
existed) is compared as the option's declared default: that build behaved as
the default.  A fact one side does not record is named as unknown.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from llmload.loadtests.options import BLOCKS, DECLARED, IGNORED, NOTED


@dataclass(frozen=True)
class Fact:
    """Something of the run that is not an option: where run.json has it, and what it is."""

    label: str
    compare: str
    path: tuple[str, ...]


#: key -> the fact (``model`` is the resolved model id: the option's value may be empty)
FACTS: dict[str, Fact] = {
    "model": Fact("target model", BLOCKS, ("model",)),
    "server_version": Fact("server version", BLOCKS, ("server", "version")),
    "dataset_sha256": Fact("dataset (content hash)", BLOCKS, ("workload", "dataset", "sha256")),
    "prompts_sha256": Fact("prompts (content hash)", BLOCKS, ("workload", "prompts_sha256")),
    "llmload_version": Fact("llmload version", NOTED, ("versions", "llmload")),
    "calibration": Fact(
        "load generator's calibration (python Mloops/s)",
        NOTED,
        ("calibration", "python_mloops_s"),
    ),
    "host": Fact("load generator's machine", NOTED, ("host",)),
}
#: the options a comparison reads, in declaration order (a fact of the same name wins)
OPTIONS = tuple(
    name for name, d in DECLARED.items() if d.spec.compare != IGNORED and name not in FACTS
)
KEYS = (*FACTS, *OPTIONS)
#: every key whose difference blocks a comparison (what ``--allow-difference`` accepts)
BLOCKING = tuple(
    k for k in KEYS if (FACTS[k].compare if k in FACTS else DECLARED[k].spec.compare) == BLOCKS
)
#: two calibrations this far apart (as a ratio) are a different machine speed
CALIBRATION_RATIO = 1.25


def label(key: str) -> str:
    """What a key is, for people: a fact's words, an option's flag."""
    return FACTS[key].label if key in FACTS else DECLARED[key].flag


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _plain(value: Any) -> Any:
    """A value as the fingerprint keeps it: lists as comma strings, tables as sorted JSON."""
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return value


def _normalised(out: dict[str, Any]) -> dict[str, Any]:
    """Closed loop has no rate; open loop's pace is its schedule, not ``--pacing``."""
    if "rate" in out:
        if out["rate"] is None:
            out["rate"] = "closed loop"
        else:
            out.pop("pacing", None)
    return out


def fingerprint(meta: dict[str, Any]) -> dict[str, Any]:
    """What shapes a run's numbers, from its run.json; a key it does not record is absent."""
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    assert isinstance(config, dict)
    out: dict[str, Any] = {k: _plain(config[k]) for k in OPTIONS if k in config}
    if meta.get("protocol"):
        out["protocol"] = meta["protocol"]
    for key, fact in FACTS.items():
        value = _get(meta, *fact.path)
        if key == "host" and isinstance(value, dict):
            value = f"{value.get('hostname')} ({value.get('cpus')} CPUs)"
        if value is not None:
            out[key] = value
    _normalised(out)
    return {k: out[k] for k in KEYS if k in out}


def baseline_fingerprint(baseline: dict[str, Any]) -> dict[str, Any]:
    """A baseline's fingerprint: made again from the run block it keeps (so options declared
    since it was written are read as they were), else the fingerprint it stored."""
    run = baseline.get("run")
    if isinstance(run, dict) and isinstance(run.get("config"), dict):
        return fingerprint(run)
    return dict(baseline.get("fingerprint") or {})


def _default(key: str) -> dict[str, Any]:
    """An option's declared default, as a fingerprint holds it (``{}`` when it has none)."""
    if key not in DECLARED or key in FACTS:
        return {}
    out = {key: _plain(DECLARED[key].default)}
    if key == "rate":
        _normalised(out)
    return out


@dataclass(frozen=True)
class Difference:
    """One key on which the run and the baseline differ (or one side does not say)."""

    key: str
    baseline: Any
    run: Any
    blocking: bool
    text: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _same(key: str, a: Any, b: Any) -> bool:
    if key == "calibration" and isinstance(a, int | float) and isinstance(b, int | float):
        lo, hi = sorted((float(a), float(b)))
        return lo > 0 and hi / lo <= CALIBRATION_RATIO
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(a == b)


def shown(value: Any) -> str:
    return (
        "none"
        if value in (None, "")
        else f"{value:.3g}"
        if isinstance(value, float)
        else str(value)
    )


def _side(fp: dict[str, Any], key: str) -> tuple[bool, Any]:
    """Whether a side says a key (an option it predates says its default), and the value."""
    if key in fp:
        return True, fp[key]
    default = _default(key)
    # pacing is left out of an open-loop fingerprint on purpose: that is not "unrecorded"
    if key == "pacing" and fp.get("rate") not in (None, "closed loop"):
        return False, None
    return (True, default[key]) if key in default else (False, None)


def comparability(
    run: dict[str, Any], baseline: dict[str, Any], allow: list[str] | tuple[str, ...] = ()
) -> list[Difference]:
    """Every key on which ``run`` and ``baseline`` fingerprints differ, blocking ones first."""
    allowed = {normal_key(k) for k in allow}
    out = []
    for key in KEYS:
        if key not in baseline and key not in run:
            continue
        (has_b, a), (has_r, b) = _side(baseline, key), _side(run, key)
        if not has_b or not has_r:
            if key == "pacing":
                continue  # one side open loop: the rate says the difference
            side = "baseline" if not has_b else "run"
            out.append(
                Difference(key, a, b, False, f"{label(key)}: not recorded in the {side} (unknown)")
            )
            continue
        if _same(key, a, b):
            continue
        blocks = key in BLOCKING
        blocking = blocks and key not in allowed
        note = " (allowed by --allow-difference)" if blocks and not blocking else ""
        text = f"{label(key)}: baseline {shown(a)}, run {shown(b)}{note}"
        out.append(Difference(key, a, b, blocking, text))
    return sorted(out, key=lambda d: not d.blocking)


def normal_key(key: str) -> str:
    """``--prefix-len``, ``prefix-len`` and ``prefix_len`` are one key."""
    return key.lstrip("-").replace("-", "_")


def check_allowed(keys: list[str]) -> list[str]:
    """``--allow-difference`` keys, checked (``ValueError`` naming the known ones)."""
    bad = [k for k in keys if normal_key(k) not in BLOCKING]
    if bad:
        raise ValueError(
            f"--allow-difference: unknown key {bad[0]!r}; one of {', '.join(BLOCKING)}"
        )
    return [normal_key(k) for k in keys]


def differences_text(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between two runs' settings (their run.json), A then B, for ``report
    compare``: ``--protocol: A openai-chat, B openai-responses (shapes the numbers)``."""
    out = []
    for d in comparability(fingerprint(b), fingerprint(a)):
        if d.baseline is None or d.run is None:
            continue  # one side does not record it: nothing to say about a difference
        shapes = " (shapes the numbers)" if d.blocking else ""
        out.append(f"{label(d.key)}: A {shown(d.baseline)}, B {shown(d.run)}{shapes}")
    return out
