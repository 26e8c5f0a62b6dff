"""Prompt items and the built-in prompt sets (JSONL files in ``data/``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any


@dataclass(frozen=True, slots=True)
class Item:
    """One prompt a user can send (turn 0 of a conversation)."""

    scenario: str
    item_id: str
    messages: tuple[dict[str, Any], ...] | None = None
    prompt: str | None = None
    max_tokens: int | None = None
    lang: str = "en"
    #: ask for at least this many output tokens (``--dataset random``: exact output length)
    min_tokens: int | None = None

    def first_messages(self) -> list[dict[str, Any]]:
        """The chat messages of turn 0."""
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.prompt or ""}]


@dataclass(frozen=True, slots=True)
class ScenarioSpec:
    """A built-in scenario: its data file, default ``max_tokens`` and weight in ``mix``."""

    name: str
    max_tokens: int
    weight: float
    description: str


#: the seeds' three request types.  ``mix`` weights: 5 : 3 : 2 (chat-like traffic is
#: mostly short questions, some code, a few long documents).
BUILTIN: dict[str, ScenarioSpec] = {
    "short_qa": ScenarioSpec("short_qa", 64, 5.0, "short questions (< 50 characters)"),
    "code_gen": ScenarioSpec("code_gen", 256, 3.0, "write a small program"),
    "long_summary": ScenarioSpec("long_summary", 128, 2.0, "summarise a ~800-character passage"),
}


def _read(name: str) -> list[dict[str, Any]]:
    text = resources.files("llmload.loadtests.workload").joinpath("data", name).read_text("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@cache
def builtin_items(name: str) -> tuple[Item, ...]:
    """The prompts of a built-in scenario, in file order."""
    if name not in BUILTIN:
        raise KeyError(f"unknown scenario {name!r}; built-in: {', '.join(BUILTIN)}")
    out = []
    for row in _read(f"{name}.jsonl"):
        if "passage" in row:
            text = f"{row['instruction']}\n\n{row['passage']}"
        else:
            text = row["prompt"]
        out.append(Item(name, row["id"], prompt=text, lang=row.get("lang", "en")))
    return tuple(out)


@cache
def followups() -> dict[tuple[str, str], tuple[str, ...]]:
    """Follow-up questions by (scenario or ``*``, language)."""
    table: dict[tuple[str, str], list[str]] = {}
    for row in _read("followups.jsonl"):
        table.setdefault((row["scenario"], row["lang"]), []).append(row["prompt"])
    return {k: tuple(v) for k, v in table.items()}


def followups_for(scenario: str, lang: str) -> tuple[str, ...]:
    """Scenario-specific follow-ups plus the general ones, in ``lang`` (zh or en)."""
    table = followups()
    lang = lang if lang in ("zh", "en") else "en"
    return table.get((scenario, lang), ()) + table[("*", lang)]


def guess_lang(text: str) -> str:
    """``zh`` when the text contains CJK characters, else ``en``."""
    return "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in text) else "en"
