"""Results on disk: what a run writes and how to read it back.

- ``columns``: the pyarrow schemas of requests.parquet and sessions.parquet (units, descriptions).
- ``rows``: ``RequestRecord``/``SessionRecord`` → row dicts, the per-request metric definitions.
- ``parquet``: ``ResultWriter``, the crash-safe incremental writer thread (parts, then final files).
- ``reader``: ``load_requests``, ``load_sessions``, ``read_metadata`` (finalised or partial runs).
- ``trace``: ``TraceWriter`` for trace.jsonl.
- ``run_folder``: the run folder and its config.yaml.

Nothing is imported here, so importing one module does not pull in pyarrow for the others.
"""
