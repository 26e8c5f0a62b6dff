"""The core install leaves torch, transformers and gradio out: what a user is told then."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from llmload.target_server import engine as engine_mod
from llmload.target_server import ui


def _without(monkeypatch: pytest.MonkeyPatch, *absent: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in absent else real(name, *a)
    )


def test_transformers_engine_without_server_extra_names_the_install(monkeypatch):
    _without(monkeypatch, "torch")
    with pytest.raises(engine_mod.EngineUnavailable) as err:
        engine_mod._check_extra("transformers")
    assert "pip install 'llmload[server]'" in str(err.value)
    assert "torch" in str(err.value) and "transformers and" not in str(err.value)


def test_transformers_engine_with_server_extra_passes(monkeypatch):
    _without(monkeypatch)
    engine_mod._check_extra("transformers")  # torch and transformers are in the dev venv
    engine_mod._check_extra("synthetic")  # needs nothing beyond the core


def test_ui_without_gradio_names_the_install(monkeypatch):
    _without(monkeypatch, "gradio")
    with pytest.raises(RuntimeError, match=r"pip install 'llmload\[ui\]'"):
        ui.mount(object(), SimpleNamespace(), SimpleNamespace())
