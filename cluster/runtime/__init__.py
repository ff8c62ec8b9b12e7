"""The silo runtime: shards, their logs and queue, membership, and the roles a silo is made of.

It knows no feature (named jobs, flows): those reach it through ``SiloHooks`` passed in by the
code that builds the cluster. Ray is imported only by ``ray_transport`` and ``ray_metrics``.
"""
