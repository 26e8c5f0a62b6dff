"""``python -m bench``: a section that needs vLLM's own venv is skipped when all run, not failed."""

from __future__ import annotations

import pytest

from bench import __main__ as bench_main


def test_all_sections_skip_vllm_without_its_python(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []

    class Fake:
        @staticmethod
        def main(rest: list[str]) -> int:
            return 0

    def fake_import(module: str) -> type[Fake]:
        ran.append(module)
        return Fake

    monkeypatch.delenv("LLMLOAD_VLLM_PYTHON", raising=False)
    monkeypatch.setattr(bench_main.importlib, "import_module", fake_import)
    assert bench_main.main([]) == 0
    needing = [bench_main.BENCHES[name] for name in bench_main.NEEDS]
    assert needing == ["bench.vllm_cpu", "bench.vllm_apis"]
    assert not set(needing) & set(ran) and len(ran) == len(bench_main.BENCHES) - len(needing)
    printed = capsys.readouterr().out
    assert "vllm-cpu: skipped (needs --vllm-python PY" in printed
    assert "vllm-apis: skipped (needs --vllm-python PY" in printed
    # named, or its python given: it runs (and says itself what is missing)
    ran.clear()
    assert bench_main.main(["vllm-cpu"]) == 0 and ran == ["bench.vllm_cpu"]
    ran.clear()
    monkeypatch.setenv("LLMLOAD_VLLM_PYTHON", "/somewhere/python")
    assert bench_main.main([]) == 0 and "bench.vllm_cpu" in ran
