"""``--dataset FILE.jsonl``: the user's own prompts, one JSON object a line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from llmload.loadtests.workload.items import Item, guess_lang

DEFAULT_SCENARIO = "dataset"
_KEYS = {"messages", "prompt", "max_tokens", "scenario", "id"}


class DatasetError(ValueError):
    """A dataset file that cannot be used; the message names the file and line."""


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file (recorded in ``run.json``)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_dataset(path: Path) -> tuple[Item, ...]:
    """Parse a JSONL dataset; each line has ``messages`` or ``prompt``, optional
    ``max_tokens``, ``scenario`` (label) and ``id``.  Blank lines are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read dataset: {exc}") from None
    items = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(_item(json.loads(line), lineno))
        except (ValueError, TypeError) as exc:
            raise DatasetError(f"{path}:{lineno}: {exc}") from None
    if not items:
        raise DatasetError(f"{path}: dataset has no prompts")
    return tuple(items)


def _item(row: Any, lineno: int) -> Item:
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    unknown = set(row) - _KEYS
    if unknown:
        raise ValueError(f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS)}")
    messages, prompt = row.get("messages"), row.get("prompt")
    if (messages is None) == (prompt is None):
        raise ValueError("each line needs exactly one of 'messages' or 'prompt'")
    if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
        raise ValueError("'prompt' must be a non-empty string")
    if messages is not None:
        _check_messages(messages)
        first = messages[-1]["content"]
    else:
        first = prompt
    max_tokens = row.get("max_tokens")
    if max_tokens is not None and (
        not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
    ):
        raise ValueError(f"'max_tokens' must be a positive integer, got {max_tokens!r}")
    scenario = row.get("scenario", DEFAULT_SCENARIO)
    if not isinstance(scenario, str) or not scenario.strip():
        raise ValueError("'scenario' must be a non-empty string")
    return Item(
        scenario=scenario,
        item_id=str(row.get("id", f"line-{lineno}")),
        messages=tuple(messages) if messages is not None else None,
        prompt=prompt,
        max_tokens=max_tokens,
        lang=guess_lang(first),
    )


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}] must be an object with a string 'role'")
        if not isinstance(m.get("content"), str):
            raise ValueError(f"messages[{i}].content must be a string")
    if messages[-1]["role"] != "user":
        raise ValueError("the last message must have role 'user'")
