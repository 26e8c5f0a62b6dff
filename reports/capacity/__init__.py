"""Capacity in the reports: a step judged (``judge``), the curve (``curve``), the gate, the view."""
