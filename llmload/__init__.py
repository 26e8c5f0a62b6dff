"""llmload: load testing and latency observability for streaming LLM services.

The top layer: ``llmload.run`` composes the packages below it (see docs/development.md).
"""
