"""Experiments: compositions of normal runs (sweeps, phases' neighbours, capacity search,
microbenchmarks). This floor sits above ``veeksha.engine``: it starts runs through
:func:`veeksha.experiment.point.run_point` and reads their run folders; it never reaches inside a
run."""
