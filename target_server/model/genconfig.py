"""Per-request generation settings: model defaults < ``--generation-config`` file < request.

Everything about *how* tokens are chosen is resolved here into one ``GenerationConfig``
per request, so both engines honour the same fields the same way.  Stop strings
(from the file's ``stop_strings`` and the request's ``stop``) are taken out of the
config: the engines cut them from the text themselves (``textstream``).
"""

from __future__ import annotations

import functools
import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmload.target_server.engine import EngineInputError, GenerationRequest

if TYPE_CHECKING:  # transformers on first use: the engine process starts before it loads
    from transformers import GenerationConfig

#: OpenAI-style penalties that are not GenerationConfig fields; ``sampling`` applies them
OPENAI_PENALTIES = ("presence_penalty", "frequency_penalty")
#: fields the continuous-batching engine applies per row (beam search is not among them)
CONTINUOUS_FIELDS = frozenset(
    {
        "max_new_tokens",
        "min_new_tokens",
        "do_sample",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "typical_p",
        "repetition_penalty",
        "no_repeat_ngram_size",
        "stop_strings",
        "eos_token_id",
        "pad_token_id",
        "bos_token_id",
        "num_beams",
    }
)
#: fields that only matter when sampling
SAMPLING_ONLY = ("temperature", "top_p", "top_k", "min_p", "typical_p")


@functools.cache
def _known() -> frozenset[str]:
    from transformers import GenerationConfig

    return frozenset(GenerationConfig().to_dict()) | {"stop_strings"}


def load_generation_file(path: str | None) -> dict[str, Any]:
    """Read and check a ``--generation-config`` JSON file (``{}`` when no path)."""
    if not path:
        return {}
    try:
        fields = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--generation-config {path}: {exc}") from None
    if not isinstance(fields, dict):
        raise ValueError(f"--generation-config {path}: expected a JSON object")
    unknown = sorted(set(fields) - _known() - set(OPENAI_PENALTIES))
    if unknown:
        raise ValueError(f"--generation-config {path}: unknown GenerationConfig fields {unknown}")
    from transformers import GenerationConfig

    _build(
        GenerationConfig(),
        {k: v for k, v in fields.items() if k not in OPENAI_PENALTIES},
        ValueError,
    )
    return fields


def check_continuous(fields: dict[str, Any]) -> None:
    """Refuse, at startup, file fields the continuous engine cannot apply."""
    bad = sorted(k for k in fields if k not in CONTINUOUS_FIELDS and k not in OPENAI_PENALTIES)
    if int(fields.get("num_beams", 1) or 1) > 1:
        bad.insert(0, "num_beams>1 (beam search)")
    if bad:
        raise ValueError(
            f"--batching continuous cannot apply {bad} from --generation-config; "
            "use --batching none (model.generate) for these"
        )


def resolve(
    base: GenerationConfig, server: dict[str, Any], request: GenerationRequest
) -> tuple[GenerationConfig, dict[str, float], tuple[str, ...]]:
    """The request's (GenerationConfig, OpenAI penalties, stop strings)."""
    fields = dict(server)
    fields.update(request.extra)
    if request.temperature is not None:
        fields["temperature"] = request.temperature
    if request.top_p is not None:
        fields["top_p"] = request.top_p
    if "temperature" in fields and fields["temperature"] == 0:
        fields["do_sample"] = False
        fields.pop("temperature")
    elif request.temperature is not None or request.top_p is not None:
        fields["do_sample"] = True
    penalties = {k: float(fields.pop(k)) for k in OPENAI_PENALTIES if fields.get(k)}
    stops = tuple(fields.pop("stop_strings", None) or ())
    if isinstance(stops, str):
        stops = (stops,)
    stops = tuple(dict.fromkeys((*stops, *request.stop)))
    fields["max_new_tokens"] = request.max_tokens
    fields["min_new_tokens"] = request.max_tokens if request.ignore_eos else request.min_tokens
    gc = _build(base, fields, EngineInputError)
    return gc, penalties, tuple(s for s in stops if s)


def _build(base: GenerationConfig, fields: dict[str, Any], error: type[Exception]) -> Any:
    """``base`` updated with ``fields``, validated; ``error`` on a bad value."""
    from transformers import GenerationConfig

    merged = {**base.to_dict(), **fields}
    if not merged.get("do_sample"):  # greedy: sampling-only fields would only draw warnings
        merged.update(dict.fromkeys(SAMPLING_ONLY))
    # not GenerationConfig.from_dict: it formats the whole config as indented JSON for a
    # log line even when INFO is off, per request — CPU, and a reference cycle of
    # json's pure-Python encoder closures left for the collector (docs/scale.md)
    gc = GenerationConfig(**merged)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gc.validate(strict=True)
    except ValueError as exc:
        raise error(f"invalid generation parameters: {exc}") from None
    return gc
