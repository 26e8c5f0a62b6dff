"""What the server and the engine process of ``--engine-process on`` say to each other.

The message kinds and the shared array's slots, in a module of their own so both
sides (``engineproc`` in the server, ``enginechild`` in the child) import them
without importing each other.
"""

from __future__ import annotations

# server -> child messages
ADD, CANCEL, STOP = "add", "cancel", "stop"
# child -> server, once at startup
READY, FAILED = "ready", "failed"
# the shared array: busy seconds, busy since, rows taken, rows prefilling, batch size, GPU bytes
BUSY_TOTAL, BUSY_SINCE, TAKEN, PREFILLING, BATCH, GPU_ALLOC, GPU_RESERVED = range(7)
SHARED_SLOTS = 7
