"""``target_server.engine.TimetableEngine``: the engines streamed from the pacer's ticks."""

from __future__ import annotations

from typing import Any

from llmload.target_server.engine import TimetableEngine, is_timetable_engine
from llmload.target_server.pacer import Pacer
from llmload.target_server.settings import Settings
from llmload.target_server.synthetic import SyntheticEngine


class _Streaming:
    """A model engine's shape: ``generate`` only, no timetable."""

    name = "model"


class _NoPacer:
    """A timetable without a pacer to run it: not the ticked path."""

    def timetable(self, prepared: Any, since: float | None = None) -> Any:
        return iter(())


class _NoTimetable:
    pacer = Pacer()
    timetable = None


def test_the_synthetic_engine_is_a_timetable_engine() -> None:
    engine = SyntheticEngine(Settings())
    assert is_timetable_engine(engine)
    typed: TimetableEngine = engine  # and structurally, for the type checker
    assert isinstance(typed.pacer, Pacer)


def test_engines_without_a_timetable_and_a_pacer_are_not() -> None:
    for engine in (_Streaming(), _NoPacer(), _NoTimetable(), None):
        assert not is_timetable_engine(engine)
