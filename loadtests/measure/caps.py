"""What one response may hold: the caps on an SSE event and on a body, and their error.

A server that never finishes — an event whose bytes keep coming without its
blank line, a body that never ends — must not grow the load generator's memory
without bound.  ``--max-event-bytes`` caps what one SSE event may hold before
its end (``loadtests.measure.sse``), ``--max-body-bytes`` what one response body
may hold once decoded (``loadtests.transport``: both HTTP clients, and gzip's
output, not its input).  Past either the request ends at once as ``protocol``
with the message of ``OverCap``; the connection is closed, not reused.
"""

from __future__ import annotations

from llmload.loadtests.options import MAX_BODY_BYTES, MAX_EVENT_BYTES
from llmload.loadtests.sizes import format_size

__all__ = ["MAX_BODY_BYTES", "MAX_EVENT_BYTES", "OverCap", "body_over", "event_over"]


class OverCap(Exception):
    """A response held more than a cap allows: recorded as ``protocol`` with this message."""


def event_over(limit: int) -> OverCap:
    return OverCap(
        f"SSE event over --max-event-bytes ({format_size(limit)}) without its end: "
        "the rest of the response was not read"
    )


def body_over(limit: int) -> OverCap:
    return OverCap(
        f"response body over --max-body-bytes ({format_size(limit)}): "
        "the rest of the response was not read"
    )
