"""A run read into the record table, and the statistics over it (one job: the numbers)."""
