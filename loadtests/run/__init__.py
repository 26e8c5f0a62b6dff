"""The run: phases over locust, users, load shapes, distributed mode, the run writer and sinks."""
