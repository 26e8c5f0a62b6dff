"""Token ids -> text pieces, one per token, never splitting a UTF-8 character.

Byte-level BPE tokens may end in the middle of a multi-byte character; the
decoder then shows U+FFFD.  ``TextStream`` holds such bytes back (that token's
piece is ``""``) and releases the character with the token that completes it.
It also holds back text that could be the start of a stop string, and once a
stop string appears it returns the text before it and sets ``stopped``.
"""

from __future__ import annotations

from typing import Any

#: a UTF-8 character has at most 4 bytes, so at most 4 tokens; past that U+FFFD is real
_MAX_CHAR_TOKENS = 4


class TextStream:
    """Incremental detokeniser with stop strings (one instance per request)."""

    def __init__(self, tokenizer: Any, stops: tuple[str, ...] = ()):
        self.tokenizer = tokenizer
        # the Rust tokenizer's own decode is ~7x cheaper per call than the Python wrapper's;
        # it gives the same text unless the wrapper would also clean up spaces
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._fast = None
        if backend is not None and not getattr(tokenizer, "clean_up_tokenization_spaces", True):
            self._fast = backend.decode
        self.stops = stops
        self.ids: list[int] = []
        self._prefix = 0  # start of the context window
        self._read = 0  # ids[:_read] are already turned into text
        self._held = ""  # decoded text not yet released (stop-string prefix)
        self.stopped = False

    def _decode(self, ids: list[int]) -> str:
        if self._fast is not None:
            return str(self._fast(ids, skip_special_tokens=True))
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def push(self, token_id: int) -> str:
        """Add one generated token; return the text that may be shown now."""
        if self.stopped:
            return ""
        self.ids.append(token_id)
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        pending = len(self.ids) - self._read
        if len(after) <= len(before):
            return ""
        if after.endswith("\ufffd") and pending < _MAX_CHAR_TOKENS:
            return ""  # a character cut in the middle: wait for its other bytes
        new = after[len(before) :]
        self._prefix, self._read = self._read, len(self.ids)
        return self._release(new)

    def flush(self) -> str:
        """At the end: whatever is still held (a cut character decodes as U+FFFD)."""
        if self.stopped:
            return ""
        before = self._decode(self.ids[self._prefix : self._read])
        tail = self._decode(self.ids[self._prefix :])[len(before) :]
        self._prefix = self._read = len(self.ids)
        return self._release(tail, final=True)

    def _release(self, new: str, final: bool = False) -> str:
        buf = self._held + new
        if self.stops:
            cut = min((i for i in (buf.find(s) for s in self.stops) if i >= 0), default=-1)
            if cut >= 0:
                self.stopped = True
                self._held = ""
                return buf[:cut]
        keep = 0 if final else _stop_prefix_len(buf, self.stops)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]


def _stop_prefix_len(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest suffix of ``text`` that begins some stop string."""
    best = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), best, -1):
            if stop.startswith(text[-k:]):
                best = k
                break
    return best
