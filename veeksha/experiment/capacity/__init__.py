"""Capacity search: the highest arrival rate or concurrency at which every SLO holds.

Modules, one concept each: ``config`` (the search file and its checks), ``knob`` (what is
varied), ``search`` (the geometric-then-bisection algorithm, pure), ``order_stats`` (the
percentile's confidence interval), ``judge`` (a value's statistical verdict), ``measure`` (runs
at one value: health retry, extensions of undecided values), ``probe`` (one probe run through
``run_point``), ``runner`` (the whole search: one server, capacity.json), ``plot`` and ``cli``.
See docs/experiments.md, "Capacity search".
"""
