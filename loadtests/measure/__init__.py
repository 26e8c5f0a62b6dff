"""The measurement: SSE parsing, the timing core, the record, the protocol adapters."""
