"""The CI gate: a run against a baseline, beyond noise, with its verdict and outputs."""
