"""llmload: loadtests."""

if __name__ != "llmload.loadtests":  # one module object per module: never a second spelling
    raise ImportError(f"{__name__} installs as llmload.loadtests: import that, not {__name__}")
