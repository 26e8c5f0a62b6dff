"""llmload: dashboards."""
