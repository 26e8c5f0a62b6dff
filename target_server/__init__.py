"""llmload: target_server."""
