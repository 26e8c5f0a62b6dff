"""llmload: reports."""
