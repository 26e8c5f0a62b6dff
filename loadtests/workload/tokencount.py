"""Client-side token counts from a local Hugging Face tokenizer (``--tokenizer PATH``).

``load(path)`` accepts a tokenizer directory (``tokenizer.json``, or the files a
slow tokenizer needs) or a ``tokenizer.json`` file, and returns a ``TokenCounter``
whose ``count(text)`` is the number of tokens the model would have generated for
that text (no special tokens added).  The timing core calls it on a response's
whole text, not per event: byte-level BPE merges across event boundaries.
``load_codec(path)`` is the same tokenizer with ``encode``/``decode`` (exact-length
prompts for ``--dataset random``, ShareGPT lengths).  Nothing is downloaded: the hub
is never contacted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Codec:
    """One loaded tokenizer: text to ids and back, no special tokens added."""

    encode: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]
    vocab_size: int
    source: str


def _fast(file: Path, source: str) -> Codec:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(file))
    return Codec(
        lambda text: tok.encode(text, add_special_tokens=False).ids,
        lambda ids: tok.decode(ids, skip_special_tokens=False),
        tok.get_vocab_size(),
        source,
    )


def _transformers(directory: Path) -> Codec:
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        raise ValueError(
            f"{str(directory)!r} has no tokenizer.json; loading its slow tokenizer needs "
            "transformers: pip install 'llmload[server]' (or give a tokenizer.json)"
        )
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    return Codec(
        lambda text: tok.encode(text, add_special_tokens=False),
        lambda ids: str(tok.decode(ids, clean_up_tokenization_spaces=False)),
        len(tok),
        str(directory),
    )


def load(path: str | Path) -> TokenCounter:
    """Load the tokenizer at ``path``; ``ValueError`` with the reason when it cannot."""
    codec = load_codec(path)
    encode = codec.encode
    return TokenCounter(lambda text: len(encode(text)), codec.source)


def load_codec(path: str | Path) -> Codec:
    """The tokenizer at ``path`` (directory or ``tokenizer.json``) as a ``Codec``."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"tokenizer path {str(p)!r} does not exist")
    if p.is_file():
        if p.suffix != ".json":
            raise ValueError(f"{str(p)!r}: give a tokenizer directory or a tokenizer.json")
        return _fast(p, str(p))
    if (p / "tokenizer.json").is_file():
        return _fast(p / "tokenizer.json", str(p))
    try:
        return _transformers(p)
    except (OSError, ValueError) as exc:
        raise ValueError(f"no tokenizer could be loaded from {str(p)!r}: {exc}") from exc
