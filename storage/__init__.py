"""Generic durable logs: named, fenced, append-only. Knows nothing of jobs."""
