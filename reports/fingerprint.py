"""Only comparable runs are compared: what shapes the numbers, and what differs between two runs.

``fingerprint(run_json)`` reads, from a run's ``run.json`` (or the ``run`` block
a baseline keeps), everything that decides what the target was asked to do and
which target it was — and, as context, what measured it:

* **blocking** — a difference alone can move the metrics, so the gate refuses
  (inconclusive, naming it) unless ``--allow-difference KEY``: the target's model
  id and its server version (where the server says one: vLLM's ``/version``,
  TGI's ``/info``, the bundled server's ``/version``), the protocol, the scenario
  or dataset and its content hash, ``max_tokens``, ``ignore_eos``, temperature,
  turns, the random dataset's lengths, users or rate, arrivals, pacing, shape,
  the modes run, the tokenizer;
* **noted** — named, never blocking: the llmload version (the metric definitions
  of docs/metrics.md do not change with it), the load generator's machine and
  its calibration (its speed: the trust box judges the client, not this), the
  phase length and warm-up (they change how many samples, not what they are).

A key one side does not record (a run from an older llmload) is named as
unknown, not as a difference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: key -> what it is, for people; a difference in one of these can move the metrics
BLOCKING: dict[str, str] = {
    "model": "target model",
    "server_version": "server version",
    "protocol": "protocol",
    "scenario": "scenario",
    "dataset_sha256": "dataset (content hash)",
    "prompts_sha256": "prompts (content hash)",
    "max_tokens": "max_tokens",
    "ignore_eos": "ignore_eos",
    "temperature": "temperature",
    "turns": "turns",
    "input_len": "input length",
    "output_len": "output length",
    "range_ratio": "length range ratio",
    "users": "users",
    "rate": "rate (requests/s)",
    "arrival": "arrivals",
    "pacing": "pacing",
    "shape": "load shape",
    "modes": "modes",
    "tokenizer": "tokenizer",
}
#: named when they differ, never blocking
NOTED: dict[str, str] = {
    "llmload_version": "llmload version",
    "calibration": "load generator's calibration (python Mloops/s)",
    "host": "load generator's machine",
    "duration": "phase length",
    "warmup": "warm-up",
}
KEYS = (*BLOCKING, *NOTED)
#: two calibrations this far apart (as a ratio) are a different machine speed
CALIBRATION_RATIO = 1.25
_CONFIG_KEYS = (
    "protocol",
    "scenario",
    "max_tokens",
    "ignore_eos",
    "temperature",
    "turns",
    "input_len",
    "output_len",
    "range_ratio",
    "users",
    "rate",
    "arrival",
    "pacing",
    "shape",
    "modes",
    "tokenizer",
    "duration",
    "warmup",
)


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def fingerprint(meta: dict[str, Any]) -> dict[str, Any]:
    """What shapes a run's numbers, from its run.json; a key it does not record is absent."""
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    assert isinstance(config, dict)
    out: dict[str, Any] = {k: config[k] for k in _CONFIG_KEYS if k in config}
    if meta.get("protocol"):
        out["protocol"] = meta["protocol"]
    if "rate" in out:
        if out["rate"] is None:
            out["rate"] = "closed loop"
        else:
            out.pop("pacing", None)  # open loop: the schedule sets the pace, not --pacing
    if isinstance(out.get("modes"), list):
        out["modes"] = ",".join(str(m) for m in out["modes"])
    found = {
        "model": meta.get("model"),
        "server_version": _get(meta, "server", "version"),
        "dataset_sha256": _get(meta, "workload", "dataset", "sha256"),
        "prompts_sha256": _get(meta, "workload", "prompts_sha256"),
        "llmload_version": _get(meta, "versions", "llmload"),
        "calibration": _get(meta, "calibration", "python_mloops_s"),
    }
    out.update({k: v for k, v in found.items() if v is not None})
    host = meta.get("host")
    if isinstance(host, dict):
        out["host"] = f"{host.get('hostname')} ({host.get('cpus')} CPUs)"
    return {k: out[k] for k in KEYS if k in out}


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


def _shown(value: Any) -> str:
    return (
        "none"
        if value in (None, "")
        else f"{value:.3g}"
        if isinstance(value, float)
        else str(value)
    )


def comparability(
    run: dict[str, Any], baseline: dict[str, Any], allow: list[str] | tuple[str, ...] = ()
) -> list[Difference]:
    """Every key on which ``run`` and ``baseline`` fingerprints differ, blocking ones first."""
    out = []
    for key in KEYS:
        label = BLOCKING.get(key) or NOTED[key]
        if key not in baseline and key not in run:
            continue
        a, b = baseline.get(key), run.get(key)
        if key not in baseline or key not in run:
            side = "baseline" if key not in baseline else "run"
            out.append(
                Difference(key, a, b, False, f"{label}: not recorded in the {side} (unknown)")
            )
            continue
        if _same(key, a, b):
            continue
        blocking = key in BLOCKING and key not in allow
        note = "" if blocking or key not in BLOCKING else " (allowed by --allow-difference)"
        out.append(
            Difference(
                key,
                a,
                b,
                blocking,
                f"{label}: baseline {_shown(a)}, run {_shown(b)}{note}",
            )
        )
    return sorted(out, key=lambda d: not d.blocking)


def check_allowed(keys: list[str]) -> list[str]:
    """``--allow-difference`` keys, checked (``ValueError`` naming the known ones)."""
    bad = [k for k in keys if k not in BLOCKING]
    if bad:
        raise ValueError(
            f"--allow-difference: unknown key {bad[0]!r}; one of {', '.join(BLOCKING)}"
        )
    return keys
