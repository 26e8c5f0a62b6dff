"""llmload: dashboards."""

if __name__ != "llmload.dashboards":  # one module object per module: never a second spelling
    raise ImportError(f"{__name__} installs as llmload.dashboards: import that, not {__name__}")
