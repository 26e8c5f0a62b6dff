"""Per-workload views of a run: prefix cache, agent sessions, traces."""
