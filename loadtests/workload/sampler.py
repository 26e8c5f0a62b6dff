"""What each simulated user sends: a weighted, seeded choice of prompts, optionally multi-turn.

Prompts come from the built-in scenarios, a JSONL or ShareGPT file
(``--dataset FILE``), or are made per request (``--dataset random``).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from llmload.loadtests.measure.adapters.base import Prompt
from llmload.loadtests.workload import random_dataset, sharegpt
from llmload.loadtests.workload.dataset import file_sha256, load_dataset
from llmload.loadtests.workload.items import BUILTIN, Item, builtin_items, followups_for

MIX = "mix"
RANDOM = "random"
#: ``max_tokens`` of dataset lines that name none
DATASET_MAX_TOKENS = 256


@runtime_checkable
class Generator(Protocol):
    """A pool's prompt maker that says what it makes (``random``, ``prefix``): ``run.json``."""

    def __call__(self, rng: random.Random) -> Item: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Pool:
    """Prompts chosen together: a built-in scenario, or a whole dataset."""

    name: str
    items: tuple[Item, ...]
    weight: float
    max_tokens: int
    #: a pool whose prompts are made per request from the user's generator (``random``)
    make: Callable[[random.Random], Item] | None = None


def parse_mix(spec: str) -> dict[str, float]:
    """``mix`` (built-in weights), ``NAME``, ``a,b`` (equal) or ``a:5,b:1`` -> weights."""
    if spec == MIX:
        return {name: s.weight for name, s in BUILTIN.items()}
    weights: dict[str, float] = {}
    for part in spec.split(","):
        name, _, w = part.strip().partition(":")
        if name not in BUILTIN:
            raise ValueError(f"unknown scenario {name!r}; built-in: {', '.join(BUILTIN)}, {MIX}")
        try:
            weight = float(w) if w else 1.0
        except ValueError:
            raise ValueError(f"bad weight {w!r} for scenario {name!r}") from None
        if weight <= 0:
            raise ValueError(f"weight of {name!r} must be > 0")
        weights[name] = weight
    return weights


def prompts_sha256(pools: list[Pool]) -> str:
    """A hash of the built-in prompts a run draws from (what they say, their max_tokens)."""
    h = hashlib.sha256()
    for pool in pools:
        h.update(json.dumps([pool.name, pool.weight, pool.max_tokens]).encode())
        for item in pool.items:
            h.update(json.dumps(asdict(item), sort_keys=True, default=str).encode())
    return h.hexdigest()


class Workload:
    """The prompts of a run; ``for_user(i)`` gives user ``i`` its own seeded sequence
    (``for_user(i, lap)``: another, for a capacity step's own prompts)."""

    def __init__(
        self,
        pools: list[Pool],
        *,
        scenario: str,
        seed: int,
        turns: int,
        max_tokens: int | None,
        dataset: Path | None = None,
    ) -> None:
        if turns < 1:
            raise ValueError("turns must be >= 1")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        self.pools = pools
        self.scenario = scenario
        self.seed = seed
        self.turns = turns
        self.max_tokens = max_tokens
        self.dataset = dataset
        self._dataset_sha = file_sha256(dataset) if dataset is not None else None
        self._prompts_sha = prompts_sha256(pools) if dataset is None else None

    @property
    def names(self) -> list[str]:
        """Scenario names present (dataset lines carry their own labels)."""
        made = {pool.name for pool in self.pools if pool.make is not None}
        return sorted(made | {item.scenario for pool in self.pools for item in pool.items})

    def for_user(self, user_index: int, lap: int = 0) -> UserPrompts:
        """User ``user_index``'s prompt sequence; the same for the same (seed, index, lap).

        ``lap`` (``Phase.lap``, a capacity step's): a sequence of that lap's own — generated
        prompts (``random``, ``prefix``'s suffixes) other texts, a deck another order."""
        return UserPrompts(self, user_index, lap)

    def describe(self) -> dict[str, Any]:
        """What ``run.json`` records about the workload."""
        return {
            "scenario": self.scenario,
            "names": self.names,
            "seed": self.seed,
            "turns": self.turns,
            "max_tokens_override": self.max_tokens,
            "pools": {
                p.name: {
                    "prompts": len(p.items),
                    "weight": p.weight,
                    "max_tokens": self.max_tokens or p.max_tokens,
                    **({"generator": p.make.describe()} if isinstance(p.make, Generator) else {}),
                }
                for p in self.pools
            },
            **({"prompts_sha256": self._prompts_sha} if self._prompts_sha else {}),
            "dataset": None
            if self.dataset is None
            else {
                "path": str(self.dataset),
                "sha256": self._dataset_sha,
                "prompts": sum(len(p.items) for p in self.pools),
            },
        }


def lap_salt(lap: int) -> str:
    """What a lap adds to a generator's seed: nothing for lap 0 (a run's own prompts, as
    before laps existed), ``:k`` for lap ``k`` (``replay`` salts a trace's texts alike)."""
    return f":{lap}" if lap else ""


class UserPrompts:
    """One simulated user's prompts: ``next()``, then ``record_reply(text)`` after each answer.

    With ``turns > 1`` a conversation lasts ``turns`` prompts: each follow-up
    carries the whole history (user and assistant messages), so prompts grow as
    real chats do.  A turn whose reply was never recorded (the request failed)
    ends its conversation; the next prompt starts a new one at turn 0.
    """

    def __init__(self, workload: Workload, user_index: int, lap: int = 0) -> None:
        self._w = workload
        self.user_index = user_index
        self._rng = random.Random(f"llmload:{workload.seed}:{user_index}{lap_salt(lap)}")
        self._decks: dict[str, list[Item]] = {}
        self._pool_names = [p.name for p in workload.pools]
        self._pool_weights = [p.weight for p in workload.pools]
        self._pools = {p.name: p for p in workload.pools}
        self._history: list[dict[str, Any]] = []
        self._item: Item | None = None
        self._max_tokens = 0
        self._turn = 0
        self._awaiting = False

    def next(self) -> Prompt:
        """The next prompt this user sends."""
        w = self._w
        if self._item is not None and not self._awaiting and self._turn + 1 < w.turns:
            return self._follow_up(self._item)
        return self._start()

    def record_reply(self, text: str) -> None:
        """The assistant's reply to the last prompt (kept as history for the next turn)."""
        if self._awaiting:
            self._history.append({"role": "assistant", "content": text})
            self._awaiting = False

    def _start(self) -> Prompt:
        if len(self._pool_names) == 1:
            name = self._pool_names[0]
        else:
            name = self._rng.choices(self._pool_names, self._pool_weights)[0]
        pool = self._pools[name]
        item = self._draw(pool)
        self._item = item
        self._turn = 0
        self._awaiting = True
        self._max_tokens = self._w.max_tokens or item.max_tokens or pool.max_tokens
        self._history = item.first_messages()
        return Prompt(
            scenario=item.scenario,
            prompt_id=f"{item.scenario}/{item.item_id}",
            messages=list(self._history),
            prompt=item.prompt if item.messages is None else None,
            max_tokens=self._max_tokens,
            turn=0,
            min_tokens=item.min_tokens,
        )

    def _follow_up(self, item: Item) -> Prompt:
        self._turn += 1
        text = self._rng.choice(followups_for(item.scenario, item.lang))
        self._history.append({"role": "user", "content": text})
        self._awaiting = True
        return Prompt(
            scenario=item.scenario,
            prompt_id=f"{item.scenario}/{item.item_id}/t{self._turn}",
            messages=list(self._history),
            max_tokens=self._max_tokens,
            turn=self._turn,
        )

    def _draw(self, pool: Pool) -> Item:
        """Deal from a per-user shuffled deck, reshuffled when empty: every prompt gets used."""
        if pool.make is not None:
            return pool.make(self._rng)
        deck = self._decks.get(pool.name)
        if not deck:
            deck = list(pool.items)
            self._rng.shuffle(deck)
            self._decks[pool.name] = deck
        return deck.pop()


def load_workload(
    scenario: str = MIX,
    dataset: Path | str | None = None,
    max_tokens: int | None = None,
    seed: int = 0,
    turns: int = 1,
    *,
    tokenizer: str | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    range_ratio: float = 0.0,
) -> Workload:
    """Build the run's workload: built-in scenarios (``mix``, a name, or ``a:5,b:1``) or a dataset.

    ``dataset`` is a JSONL or ShareGPT file, or ``"random"`` (exact ``input_len`` /
    ``output_len`` tokens in ``tokenizer``, else the embedded model's).  With a
    file, ``scenario`` other than ``mix`` keeps only the lines with that label.
    """
    if str(dataset) == RANDOM:
        if max_tokens is not None:
            raise ValueError("--dataset random: give output lengths with --output-len")
        make = random_dataset.RandomPrompts(
            random_dataset.codec_for(tokenizer),
            input_len or random_dataset.INPUT_LEN,
            output_len or random_dataset.OUTPUT_LEN,
            range_ratio,
        )
        make.words  # noqa: B018  (a tokenizer without word tokens fails here, before the run)
        pool = Pool(RANDOM, (), 1.0, make.output_len, make=make)
        return Workload([pool], scenario=scenario, seed=seed, turns=turns, max_tokens=None)
    if dataset is not None:
        dataset = Path(dataset)
        items = _file_items(dataset, tokenizer, seed, output_len)
        if scenario != MIX:
            items = tuple(i for i in items if i.scenario == scenario)
            if not items:
                raise ValueError(f"{dataset}: no lines with scenario {scenario!r}")
        pools = [Pool("dataset", items, 1.0, DATASET_MAX_TOKENS)]
    else:
        pools = [
            Pool(name, builtin_items(name), weight, BUILTIN[name].max_tokens)
            for name, weight in parse_mix(scenario).items()
        ]
    return Workload(
        pools, scenario=scenario, seed=seed, turns=turns, max_tokens=max_tokens, dataset=dataset
    )


def _file_items(
    path: Path, tokenizer: str | None, seed: int, output_len: int | None
) -> tuple[Item, ...]:
    """A JSONL dataset, or a ShareGPT JSON one (told apart by the first character)."""
    try:
        with path.open(encoding="utf-8") as f:
            head = f.read(64)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read dataset: {exc}") from None
    if not sharegpt.looks_like_sharegpt(head):
        if output_len is not None:
            raise ValueError("--output-len applies to --dataset random or a ShareGPT file")
        return load_dataset(path)
    text = path.read_text(encoding="utf-8")
    return sharegpt.load_sharegpt(path, text, random_dataset.codec_for(tokenizer), seed, output_len)
