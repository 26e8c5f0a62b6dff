"""Client-side token counts from a local Hugging Face tokenizer (``--tokenizer PATH``).

``load(path)`` accepts a tokenizer directory (``tokenizer.json``, or the files a
slow tokenizer needs) or a ``tokenizer.json`` file, and returns a ``TokenCounter``
whose ``count(text)`` is the number of tokens the model would have generated for
that text (no special tokens added).  The timing core calls it on a response's
whole text, not per event: byte-level BPE merges across event boundaries.
Nothing is downloaded: the hub is never contacted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


class TokenCounter:
    """Counts tokens with one loaded tokenizer; callable as ``counter(text)``."""

    def __init__(self, encode: Callable[[str], int], source: str) -> None:
        self._encode = encode
        self.source = source

    def count(self, text: str) -> int:
        """Tokens in ``text`` (0 for the empty string)."""
        return self._encode(text) if text else 0

    def __call__(self, text: str) -> int:
        return self.count(text)


def _fast(file: Path) -> Callable[[str], int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(file))
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def _transformers(directory: Path) -> Callable[[str], int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    return lambda text: len(tok.encode(text, add_special_tokens=False))


def load(path: str | Path) -> TokenCounter:
    """Load the tokenizer at ``path``; ``ValueError`` with the reason when it cannot."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"tokenizer path {str(p)!r} does not exist")
    if p.is_file():
        if p.suffix != ".json":
            raise ValueError(f"{str(p)!r}: give a tokenizer directory or a tokenizer.json")
        return TokenCounter(_fast(p), str(p))
    if (p / "tokenizer.json").is_file():
        return TokenCounter(_fast(p / "tokenizer.json"), str(p))
    try:
        return TokenCounter(_transformers(p), str(p))
    except (OSError, ValueError) as exc:
        raise ValueError(f"no tokenizer could be loaded from {str(p)!r}: {exc}") from exc
