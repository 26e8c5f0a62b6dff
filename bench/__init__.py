"""Benchmarks: each module measures one thing and rewrites its own BENCHMARKS.md section."""
