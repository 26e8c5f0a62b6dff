"""Agent sessions on the run path: a user runs one whole session as one locust task.

``run_session`` sends a session's steps (``workload.agent``): each step's answer
is read by the user's ``ToolCallTap``, whose calls give the next step; between
an answer and the next step the user waits the session's think time (the tool
running).  The session ends with its final answer, a failed step (its record
says why), a step that no longer fits the target's context, or the phase
stopping (no step starts once the phase has stopped accepting requests).  Only
step 0 has an intended send time (open loop: the session's arrival); later
steps follow their answers, as an agent's do.
"""

from __future__ import annotations

from collections.abc import Callable

import gevent

from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.measure.adapters.toolcalls import ToolCallTap
from llmload.loadtests.measure.record import RequestRecord
from llmload.loadtests.run.context import LoadContext
from llmload.loadtests.workload.agent import AgentSessions

#: sends one prompt (with its intended send time, or None) and returns its record
Issue = Callable[[Prompt, float | None], RequestRecord]


def run_session(
    issue: Issue,
    tap: ToolCallTap,
    ctx: LoadContext,
    sessions: AgentSessions,
    first: Prompt,
    intended: float | None = None,
) -> int:
    """Send ``first`` and the steps that follow it; returns the number of requests sent."""
    prompt: Prompt | None = first
    sent = 0
    while prompt is not None:
        record = issue(prompt, intended)
        sent += 1
        intended = None
        if not record.ok:
            return sent
        prompt = sessions.follow(tap.calls)
        if prompt is None:
            return sent
        if sessions.think_s > 0:
            gevent.sleep(sessions.think_s)
        if not ctx.accepting:
            return sent
        if ctx.fit is not None:
            prompt = ctx.fit.fit(prompt)
    return sent
