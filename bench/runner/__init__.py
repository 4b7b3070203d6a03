"""The benchmark runner (see bench/run.py)."""
