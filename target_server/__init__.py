"""llmload: target_server."""

if __name__ != "llmload.target_server":  # one module object per module: never a second spelling
    raise ImportError(f"{__name__} installs as llmload.target_server: import that, not {__name__}")
