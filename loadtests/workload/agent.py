"""``--dataset agent``: agent sessions — the model calls a tool, the result comes back, again.

A session is ``--agent-steps K`` model calls on the chat endpoint.  Step 0 sends a
task (a prompt of ``--scenario``, as any run draws it) and offers one function,
``TOOL`` (``search``); the model answers with a call; after ``--think-time D``
(the tool running) a tool result of exactly ``--tool-result-tokens N`` tokens
(the target's tokenizer, as ``--dataset random`` counts) comes back, and the next
step sends the whole history: the task, each call as the assistant's message
(its id, name and arguments as the server sent them) and each result as a
``tool`` message.  Steps ``1 .. K-2`` offer the tool again; the last one sends
``tool_choice: "none"``, so its answer is the session's final answer.  A step
answered without a call is the final answer too (a real model may stop early);
a failed step ends the session without one.  The prompts grow as agents' do:
step ``k`` carries ``k`` calls and ``k`` results.

Each user runs its sessions one after another (``for_user(i)``: ``AgentSessions``);
``--pacing`` spaces session starts, and ``--rate`` (open loop) is sessions per
second, each arrival a session.  Every request carries its ``session_id`` and
``step`` into its record; the report's per-step TTFT and per-session time to the
final answer are read from those (``reports.workloads.measure``).
"""

from __future__ import annotations

import random
from typing import Any

from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.measure.adapters.toolcalls import ToolCall
from llmload.loadtests.workload.random_dataset import RandomPrompts
from llmload.loadtests.workload.sampler import Workload, lap_salt

SCENARIO = "agent"
STEPS, RESULT_TOKENS = 4, 256
#: the function every session offers (the OpenAI ``tools`` entry)
TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the documents; returns the passages that match the query.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "what to look for"}},
            "required": ["query"],
        },
    },
}


class AgentWorkload:
    """Agent sessions over a task workload (module docstring)."""

    turns = 1

    def __init__(
        self,
        tasks: Workload,
        make: RandomPrompts,
        *,
        steps: int = STEPS,
        result_tokens: int = RESULT_TOKENS,
        think_s: float = 0.0,
        seed: int = 0,
    ) -> None:
        if steps < 1 or result_tokens < 1 or think_s < 0:
            raise ValueError("--agent-steps and --tool-result-tokens must be >= 1")
        self.tasks = tasks
        self.make = make
        self.steps = steps
        self.result_tokens = result_tokens
        self.think_s = think_s
        self.seed = seed
        make.words  # noqa: B018  (a tokenizer without word tokens fails here, before the run)

    @property
    def names(self) -> list[str]:
        return [SCENARIO]

    def for_user(self, index: int, lap: int = 0) -> AgentSessions:
        """User ``index``'s sessions (open loop: the arrival's, one session); ``lap``: a
        capacity step's own (other tasks drawn, other tool results, other session ids)."""
        return AgentSessions(self, index, lap)

    def describe(self) -> dict[str, Any]:
        """What ``run.json`` records about the workload."""
        return {
            "scenario": SCENARIO,
            "names": self.names,
            "seed": self.seed,
            "turns": 1,
            "agent": {
                "steps": self.steps,
                "tool_result_tokens": self.result_tokens,
                "think_time_s": self.think_s,
                "tool": TOOL["function"]["name"],
                "tasks": self.tasks.scenario,
                "tokenizer": self.make.codec.source,
            },
        }


class AgentSessions:
    """One user's sessions: ``next()`` starts one, ``follow(calls)`` gives its next step."""

    def __init__(self, workload: AgentWorkload, user_index: int, lap: int = 0) -> None:
        self._w = workload
        self.user_index = user_index
        self.think_s = workload.think_s
        self._tasks = workload.tasks.for_user(user_index, lap)
        self._rng = random.Random(f"llmload-agent:{workload.seed}:{user_index}{lap_salt(lap)}")
        #: session ids ``USER-N``; a lap's ``USER-N.LAP``, so steps pooled never share one
        self._lap = f".{lap}" if lap else ""
        self._sessions = 0
        self._session = ""
        self._history: list[dict[str, Any]] = []
        self._step = 0
        self._max_tokens = 0

    def next(self) -> Prompt:
        """Step 0 of a new session."""
        task = self._tasks.next()
        self._session = f"{self.user_index}-{self._sessions}{self._lap}"
        self._sessions += 1
        self._history = list(task.messages or [{"role": "user", "content": task.prompt or ""}])
        self._step = 0
        self._max_tokens = task.max_tokens
        return self._prompt()

    def record_reply(self, text: str) -> None:
        """The closed loop's hook: a session's steps are driven by ``follow`` instead."""

    def follow(self, calls: list[ToolCall]) -> Prompt | None:
        """The step after an answer that made ``calls``; None when the session is over."""
        if not calls or self._step + 1 >= self._w.steps:
            return None
        self._history.append(
            {"role": "assistant", "content": None, "tool_calls": [c.message() for c in calls]}
        )
        for call in calls:
            result = self._w.make.text(self._w.result_tokens, self._rng)
            self._history.append({"role": "tool", "tool_call_id": call.id, "content": result})
        self._step += 1
        return self._prompt()

    def _prompt(self) -> Prompt:
        last = self._step == self._w.steps - 1
        return Prompt(
            scenario=SCENARIO,
            prompt_id=f"{SCENARIO}/{self._session}/s{self._step}",
            messages=list(self._history),
            max_tokens=self._max_tokens,
            tools=(TOOL,),
            tool_choice="none" if last else None,
            session_id=self._session,
            step=self._step,
        )
