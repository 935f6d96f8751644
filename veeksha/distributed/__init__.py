"""Distributed runs: one experiment over several hosts (docs/distributed.md).

The floor above the engine. The pure parts (the partition of the schedule, the clock offset,
the merge of shard folders) import no Ray; only the driver and the shard actor do.
"""
