"""Runnable benchmarks: ``python -m benchmarks.<name>``; results go to benchmarks/results/."""
