"""Names the load generator shares with the dashboards, importable without the Grafana SDK.

``llmload run --grafana-url`` tags its phase annotations with ``PHASE_TAG`` on the
dashboard ``UID``; importing them from here keeps ``grafana-foundation-sdk`` (about
0.1 s of imports) out of the load generator's start-up.
"""

UID = "llmload-load-test"
TITLE = "LLM load test"
#: Tag on every annotation the load generator posts (``dashboards.annotations``).
PHASE_TAG = "llmload"
