"""The server's side of a run: what the target's own ``/metrics`` said, phase by phase.

``server_metrics.jsonl`` (``loadtests.run.scrape``) is read by ``reports.table.scrapes``;
``histogram`` turns two cumulative snapshots into a phase's distribution and
its quantiles (with the bucket each lies in); ``phase`` builds a phase's
``server`` block of ``summary.json``; ``diagnose`` says in words why latency
moved; ``view`` draws it in ``report.html``; ``versus`` gives the rows
``report compare`` and the gate show beside the client's (one run versus another); ``saturation`` is
the capacity search's evidence.  Which family plays which role is
``loadtests.serverfamilies``.
"""
