"""A deterministic simulation of a timeshard cluster (issue 12, deliverable 3).

Several real silos run in one process on one memory store, on an event loop whose time is
virtual, while a seeded scheduler injects faults at every store and transport call. After each
run it checks the promises of the README: nothing acknowledged lost, nothing early, one owner
firing per shard at any moment, cancels that hold, one chain per recurring job. See ``world``.
"""
