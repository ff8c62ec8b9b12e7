"""Runnable benchmarks: ``python -m benchmarks.<name>``; results go to a scratch
folder, or with ``--publish`` to benchmarks/results/ (``benchmarks.report``)."""
