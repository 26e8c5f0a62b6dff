"""The run's workload from its options: built-in scenarios, a dataset, or a generated workload.

``build_workload`` is the one place that reads ``--dataset``: a trace
(``--dataset trace FILE``: ``replay.TraceReplay``), shared prefixes
(``--dataset prefix``: ``prefix_dataset.PrefixPrompts`` in a ``sampler.Workload``),
agent sessions (``--dataset agent``: ``agent.AgentWorkload`` over ``--scenario``'s
tasks), or anything ``sampler.load_workload`` reads (scenarios, JSONL, ShareGPT,
``random``).
"""

from __future__ import annotations

from llmload.loadtests.options import AGENT, PREFIX, WorkloadOptions, trace_file
from llmload.loadtests.workload import agent, prefix_dataset, random_dataset
from llmload.loadtests.workload.replay import TraceReplay
from llmload.loadtests.workload.sampler import Pool, Workload, load_workload
from llmload.loadtests.workload.traces import read_trace


def build_workload(w: WorkloadOptions, seed: int) -> Workload | TraceReplay | agent.AgentWorkload:
    """What the users send (``ValueError`` with a one-line reason for a bad file or option)."""
    trace = trace_file(w.dataset)
    if trace is not None:
        return TraceReplay(
            read_trace(trace),
            random_dataset.RandomPrompts(random_dataset.codec_for(w.tokenizer)),
            seed=seed,
            speedup=w.speedup,
            window=w.trace_window,
        )
    if w.dataset == PREFIX:
        P = prefix_dataset
        make = P.PrefixPrompts(
            random_dataset.RandomPrompts(random_dataset.codec_for(w.tokenizer)),
            groups=w.prefix_groups or P.GROUPS,
            prefix_len=w.prefix_len or P.PREFIX_LEN,
            suffix_len=w.suffix_len or P.SUFFIX_LEN,
            output_len=w.output_len or P.OUTPUT_LEN,
            skew=w.prefix_skew,
            seed=seed,
        )
        make.prefixes  # noqa: B018  (a tokenizer without word tokens fails here, before the run)
        pool = Pool(P.SCENARIO, (), 1.0, make.output_len, make=make)
        return Workload([pool], scenario=w.scenario, seed=seed, turns=w.turns, max_tokens=None)
    if w.dataset == AGENT:
        tasks = load_workload(scenario=w.scenario, max_tokens=w.max_tokens, seed=seed)
        return agent.AgentWorkload(
            tasks,
            random_dataset.RandomPrompts(random_dataset.codec_for(w.tokenizer)),
            steps=w.agent_steps or agent.STEPS,
            result_tokens=w.tool_result_tokens or agent.RESULT_TOKENS,
            think_s=w.think_time or 0.0,
            seed=seed,
        )
    return load_workload(
        scenario=w.scenario,
        dataset=w.dataset,
        max_tokens=w.max_tokens,
        seed=seed,
        turns=w.turns,
        tokenizer=w.tokenizer,
        input_len=w.input_len,
        output_len=w.output_len,
        range_ratio=w.range_ratio,
    )
