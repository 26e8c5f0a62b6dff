"""llmload: loadtests."""
