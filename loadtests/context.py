"""What a load-generating process needs before its users start: a reachable target and a context.

``connect_target`` and ``build_context`` are shared by the local runner and
by every distributed worker (``loadtests.distributed``); ``UsageError`` is the
one way either reports a bad option or an unreachable target (exit code 2).
"""

from __future__ import annotations

import sys

from loadtests import tokencount
from loadtests.discovery import discover
from loadtests.fit import ContextFit
from loadtests.http import Target, TargetUnreachable
from loadtests.plan import RunOptions
from loadtests.scenarios import load_workload
from loadtests.sinks import RecordSink
from loadtests.users import LoadContext


class UsageError(Exception):
    """A problem with the options or the target: one line to the user, exit code 2."""


def connect_target(opts: RunOptions) -> Target:
    """The target, its reachability checked (and this process's client warmed up)."""
    if not opts.target:
        raise UsageError("--target URL is required (`loadtest` starts the bundled server)")
    try:
        target = Target.from_options(opts.connection)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        target.probe(timeout=5.0)
    except TargetUnreachable as exc:
        raise UsageError(str(exc)) from None
    return target


def build_context(
    opts: RunOptions,
    target: Target,
    model: str,
    sink: RecordSink,
    worker: str = "local",
    shard: int = 0,
    shards: int = 1,
) -> LoadContext:
    """What this process's users need: workload, tokenizer, target, sink."""
    tokenizer = None
    w = opts.workload
    try:
        workload = load_workload(
            scenario=w.scenario,
            dataset=w.dataset,
            max_tokens=w.max_tokens,
            seed=w.seed,
            turns=w.turns,
            tokenizer=w.tokenizer,
            input_len=w.input_len,
            output_len=w.output_len,
            range_ratio=w.range_ratio,
        )
        if w.tokenizer:
            tokenizer = tokencount.load(w.tokenizer)
        facts = discover(target, opts.protocol, model, opts.api_name)
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from None
    if worker == "local":
        for note in facts.notes:
            print(note, file=sys.stderr, flush=True)
    limit = facts.context_limit
    return LoadContext(
        connection=opts.connection,
        load=opts.load,
        sampling=w,
        target=target,
        workload=workload,
        sink=sink,
        model=model,
        worker=worker,
        shard=shard,
        shards=shards,
        tokenizer=tokenizer,
        fit=None if limit is None else ContextFit(limit, tokenizer),
        adapter_options=facts.adapter_options,
    )
