"""Capacity in the reports: a step judged (``judge``), the curve (``curve``), its view.

The gate over a capacity curve is the gate's (``reports.gate.capacity``).
"""
