"""llmload: exporter."""
