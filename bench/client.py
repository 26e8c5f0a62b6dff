"""The client process both ``bench harness`` and ``bench exporter`` run: gevent-patched,
pinned to CPU 0, sending one openai-chat streaming request shape to one target.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmload.loadtests.measure.adapters.base import Adapter, HttpCall
    from llmload.loadtests.transport.target import Target


@dataclass(frozen=True)
class BenchClient:
    """What a bench child sends: the adapter, the target and the ready-built call."""

    adapter: Adapter
    target: Target
    call: HttpCall


def gevent_client(url: str, tokens: int) -> BenchClient:
    """Patch gevent, pin this process to CPU 0 and build the streaming chat call to ``url``.

    Must run before anything else imports sockets: the patch has to come first.
    """
    from gevent import monkey

    monkey.patch_all()
    from llmload.loadtests.measure.adapters import get_adapter
    from llmload.loadtests.measure.adapters.base import Prompt
    from llmload.loadtests.options import ConnectionOptions
    from llmload.loadtests.transport.target import Target

    os.sched_setaffinity(0, {0})
    adapter = get_adapter("openai-chat")
    target = Target(ConnectionOptions(target=url, request_timeout=120, stall_timeout=60), {})
    model = target.detect_model() or "default"
    prompt = Prompt("bench", "p", prompt="hello", max_tokens=tokens)
    call = adapter.build(prompt, mode="stream", model=model, options={"ignore_eos": True})
    return BenchClient(adapter, target, call)
