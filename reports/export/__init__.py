"""A run's files as joinable tables for pandas, polars and DuckDB (one job: the data out)."""
