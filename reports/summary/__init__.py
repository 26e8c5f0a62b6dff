"""The summary of a run (summary.json): every phase's statistics, put together."""
