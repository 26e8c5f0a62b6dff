"""ShareGPT-format JSON datasets (``--dataset FILE.json``), as vLLM ``bench serve`` reads them.

A JSON array of conversations: ``{"id": ..., "conversations": [{"from": "human",
"value": "..."}, {"from": "gpt", "value": "..."}, ...]}`` (``user``/``assistant``
and a leading ``system`` entry are accepted too).  Like vLLM, each conversation
gives one request: its first human turn is the prompt and the length of the
reply that follows is the output length (``max_tokens``), counted with the
target's tokenizer (``--tokenizer``, else the embedded one); ``--output-len``
replaces it.  Also like vLLM, pairs with a prompt or reply under 4 tokens, a
prompt over 1,024 or both over 2,048 tokens are skipped.  Conversations are
shuffled with the run's seed and at most ``MAX_ITEMS`` are kept.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from llmload.loadtests.workload.items import Item, guess_lang
from llmload.loadtests.workload.tokencount import Codec

SCENARIO = "sharegpt"
MAX_ITEMS = 2000
MIN_TOKENS, MAX_PROMPT, MAX_TOTAL = 4, 1024, 2048
_USER, _ASSISTANT = {"human", "user"}, {"gpt", "assistant", "chatgpt", "bard", "model"}


def looks_like_sharegpt(text: str) -> bool:
    """A JSON array (ShareGPT) rather than JSON lines."""
    return text.lstrip()[:1] == "["


def first_exchange(conv: Any) -> tuple[list[dict[str, str]], str] | None:
    """``(messages up to the first user turn, the reply to it)`` or None if there is none."""
    turns = conv.get("conversations") if isinstance(conv, dict) else None
    if not isinstance(turns, list):
        return None
    messages: list[dict[str, str]] = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            return None
        who = str(turn.get("from", "")).lower()
        if who == "system" and not messages:
            messages.append({"role": "system", "content": turn["value"]})
        elif who in _USER:
            nxt = turns[i + 1] if i + 1 < len(turns) else None
            if not isinstance(nxt, dict) or str(nxt.get("from", "")).lower() not in _ASSISTANT:
                return None
            messages.append({"role": "user", "content": turn["value"]})
            reply = nxt.get("value")
            return (messages, reply) if isinstance(reply, str) else None
        else:
            return None
    return None


def load_sharegpt(
    path: Path, text: str, codec: Codec | None, seed: int, output_len: int | None
) -> tuple[Item, ...]:
    """The usable first exchanges of a ShareGPT file as items (``ValueError`` naming the file)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path}: not valid ShareGPT JSON: {exc}") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: ShareGPT JSON must be an array of conversations")
    order = list(range(len(data)))
    random.Random(f"llmload-sharegpt:{seed}").shuffle(order)
    items: list[Item] = []
    for index in order:
        pair = first_exchange(data[index])
        if pair is None or not pair[0][-1]["content"].strip():
            continue
        messages, reply = pair
        max_tokens = output_len
        if codec is not None:
            n_prompt = len(codec.encode(messages[-1]["content"]))
            n_reply = len(codec.encode(reply))
            if n_prompt < MIN_TOKENS or n_reply < MIN_TOKENS:
                continue
            if n_prompt > MAX_PROMPT or n_prompt + n_reply > MAX_TOTAL:
                continue
            max_tokens = output_len or n_reply
        conv_id = data[index].get("id", f"conv-{index}")
        items.append(
            Item(
                scenario=SCENARIO,
                item_id=str(conv_id),
                messages=tuple(messages),
                max_tokens=max_tokens,
                lang=guess_lang(messages[-1]["content"]),
            )
        )
        if len(items) >= MAX_ITEMS:
            break
    if not items:
        raise ValueError(f"{path}: no usable conversations (a human turn followed by a reply)")
    return tuple(items)
