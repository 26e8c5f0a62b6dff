"""Data files of the built-in scenarios (a package so they ship in wheels)."""
