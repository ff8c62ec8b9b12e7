"""The job model: times, schedules, failure policies, jobs and their wire form. Pure code.

Nothing here imports Ray or a store; everything above (runtime, features, client) and the
``handlers`` package build on it.
"""
