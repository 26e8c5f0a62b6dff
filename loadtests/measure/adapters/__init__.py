"""Protocol adapters; importing the package registers the built-in ones (see ``base``)."""

from __future__ import annotations

from llmload.loadtests.measure.adapters import (  # noqa: F401  (they register)
    anthropic_messages,
    gradio,
    openai_chat,
    openai_completions,
    openai_responses,
    pooling,
    tgi,
)
from llmload.loadtests.measure.adapters.base import ADAPTERS, Adapter


def get_adapter(name: str) -> Adapter:
    """A fresh adapter by registry name, or ``KeyError`` listing the known ones."""
    try:
        factory = ADAPTERS[name]
    except KeyError:
        raise KeyError(f"unknown adapter {name!r}; known: {', '.join(sorted(ADAPTERS))}") from None
    return factory()
