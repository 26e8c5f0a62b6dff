"""Scenarios: built-in prompt sets (``short_qa``, ``code_gen``, ``long_summary``), their
weighted ``mix``, user datasets (``--dataset FILE.jsonl``) and multi-turn conversations."""

from llmload.loadtests.workload.dataset import DatasetError, load_dataset
from llmload.loadtests.workload.items import BUILTIN, Item, ScenarioSpec, builtin_items
from llmload.loadtests.workload.sampler import MIX, UserPrompts, Workload, load_workload, parse_mix

__all__ = [
    "BUILTIN",
    "MIX",
    "DatasetError",
    "Item",
    "ScenarioSpec",
    "UserPrompts",
    "Workload",
    "builtin_items",
    "load_dataset",
    "load_workload",
    "parse_mix",
]
