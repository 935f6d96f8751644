"""Distributed runs on Ray (docs/distributed.md): one experiment on several hosts.

The partition of the schedule (``partition``), the clock offsets (``clock``) and the merge of the
shards' folders (``merge``) import nothing from Ray; the driver (``driver``), the shard actor
(``shard``) and the shard's engine process (``shard_process``) carry the run over Ray, which
they import lazily (``ray_api``): ``veeksha run`` without ``--ray`` never loads it.
"""
