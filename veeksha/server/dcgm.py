"""NVIDIA dcgm-exporter's GPU fields, read as veeksha's ``gpu:*`` samples.

dcgm-exporter (the GPU exporter of Kubernetes GPU nodes, NVIDIA Dynamo and most GPU clusters)
answers Prometheus text with one sample per GPU and field, labelled ``gpu`` (its index),
``UUID``, ``modelName``, ``Hostname``... A scrape of ``server_metrics.gpu_urls`` goes through
:func:`gpu_samples`, which renames the fields veeksha reads to the names the nvidia-smi sampler
writes (``veeksha.server.gpu``), so server_metrics.parquet holds one kind of GPU row whichever
source measured it:

==========================================  ============================  ====================
dcgm-exporter field                         row                           unit
==========================================  ============================  ====================
``DCGM_FI_DEV_GPU_UTIL``                    ``gpu:utilization``           %
``DCGM_FI_DEV_POWER_USAGE``                 ``gpu:power``                 W
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``    ``gpu:energy`` (counter)      J (the field's mJ)
``DCGM_FI_DEV_FB_USED``                     ``gpu:memory_used``           MiB
``FB_USED + FB_FREE (+ FB_RESERVED)``       ``gpu:memory_total``          MiB
``DCGM_FI_DEV_GPU_TEMP``                    ``gpu:temperature``           °C
``DCGM_FI_DEV_SM_CLOCK``                    ``gpu:sm_clock``              MHz
==========================================  ============================  ====================

Every other field of the answer is kept under its own name behind ``gpu:`` (e.g.
``gpu:DCGM_FI_PROF_SM_ACTIVE``), so a GPU row is always one whose metric starts with ``gpu:``.
Labels are ``gpu`` (the index), ``source`` (which of ``gpu_urls``: 0, 1, ...) and, when the
exporter says them, ``uuid`` and ``model``; the exporter's other labels (driver version, PCI
bus, host name) are left out.
"""

from __future__ import annotations

import json

from veeksha.record.server_metrics import Sample

__all__ = ["FIELDS", "gpu_samples"]

#: dcgm-exporter field → (veeksha's row, factor to its unit)
FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu:utilization", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("gpu:power", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("gpu:energy", 0.001),
    "DCGM_FI_DEV_FB_USED": ("gpu:memory_used", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("gpu:temperature", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("gpu:sm_clock", 1.0),
}
_FRAME_BUFFER = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")
_ENERGY_KIND = {"gpu:energy": "counter"}
_KEPT_LABELS = (("gpu", "gpu"), ("UUID", "uuid"), ("modelName", "model"))


def gpu_samples(samples: list[Sample], source: int) -> list[Sample]:
    """The ``gpu:*`` samples of one scrape of an exporter (``source``: its place in
    ``gpu_urls``); samples without a ``gpu`` label (the exporter's own) are left out."""
    out: list[Sample] = []
    frame_buffer: dict[str, dict[str, float]] = {}  # labels → FB field → MiB
    for sample_name, labels_json, value, kind, _ in samples:
        labels = json.loads(labels_json)
        if "gpu" not in labels:
            continue
        kept = {new: str(labels[old]) for old, new in _KEPT_LABELS if old in labels}
        kept["source"] = str(source)
        labels_out = json.dumps(kept, sort_keys=True)
        # (prometheus_client's parser names a counter's sample NAME_total, as OpenMetrics does;
        # dcgm-exporter writes the energy counter without the suffix)
        metric = sample_name if sample_name in FIELDS else sample_name.removesuffix("_total")
        if metric in _FRAME_BUFFER:
            frame_buffer.setdefault(labels_out, {})[metric] = value
        name, factor = FIELDS.get(metric, (f"gpu:{metric}", 1.0))
        # (the energy is a counter, though some exporters' CSVs declare it a gauge)
        out.append((name, labels_out, value * factor, _ENERGY_KIND.get(name, kind), None))
    for labels_out, fields in frame_buffer.items():
        if "DCGM_FI_DEV_FB_USED" in fields and "DCGM_FI_DEV_FB_FREE" in fields:
            out.append(("gpu:memory_total", labels_out, sum(fields.values()), "gauge", None))
    return out
