"""After the traffic: the server's own count of a sample of the prompts that were sent.

With a calibrated server tokenizer, prompts are exact in the server's tokens by construction
(``veeksha.generate.calibration``). Once the traffic has stopped (never on the traffic path),
this checks it where it matters: up to ``SAMPLE`` measured requests that were sent, chosen with
the run's seed, have their new user part (regenerated from the session generator, which gives
the same text for the same session) tokenized by the server's ``/tokenize``, and each count,
less the server's fixed overhead, is compared with the target. The deviations go to
``summary.json`` → ``run.server_tokenizer.verification``, where the ``prompt_length`` health
check judges them (docs/metrics.md); a server that fails a call here costs the comparison (its
error is reported in the same place), never the run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from veeksha.errors import TargetError
from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import column, int_column, measured_rows, of_clients
from veeksha.generate.calibration import CalibratedTokenizer
from veeksha.generate.rng import RandomStreams
from veeksha.generate.spec import SessionSpec

__all__ = ["SAMPLE", "server_tokenizer_info"]

SAMPLE = 32


def server_tokenizer_info(
    tokenizer: CalibratedTokenizer,
    requests: ColumnSource,
    make_session: Callable[[int], SessionSpec],
    seed: int,
    sample: int = SAMPLE,
    clients: list[str] | None = None,
) -> dict[str, Any]:
    """The calibration's facts and the verification of a sample of sent prompts (see above):
    with ``clients`` (the names of the clients whose prompts it counts, with ``clients:``),
    of those clients' requests only, named in the facts."""
    client = tokenizer.client
    calibration = tokenizer.calibration
    info: dict[str, Any] = {
        "endpoint": client.endpoint,
        "format": client.format,
        "calibration": tokenizer.source,
        "calibrated_words": len(calibration.words),
        "lead_words": len(calibration.lead),
        "overhead_tokens": calibration.overhead,
    }
    if clients is not None:
        info["clients"] = clients
    template = tokenizer.chat_template
    if isinstance(template, str):
        info["chat_template_error"] = template
    elif template is not None:
        info["chat_template"] = template.to_json()
    measured = measured_rows(requests)
    sent_rows = ~np.isnan(column(measured, "dispatched_at"))
    if clients is not None:  # (another client's prompt is in another tokenizer's tokens)
        sent_rows &= of_clients(measured, clients)
    sent = np.flatnonzero(sent_rows)
    verification: dict[str, Any] = {"sampled": 0, "deviations": []}
    info["verification"] = verification
    if sent.size == 0:
        return info
    rng = RandomStreams(seed).stream("verify_prompts")
    chosen = np.sort(rng.choice(sent, size=min(sample, sent.size), replace=False))
    sessions = int_column(measured, "session_id")[chosen].tolist()
    nodes = int_column(measured, "node_id")[chosen].tolist()
    deviations = []
    try:
        for session_id, node_id in zip(sessions, nodes, strict=True):
            node = make_session(session_id).nodes[node_id]
            counted = client.count(node.prompt) - calibration.overhead
            deviations.append(counted - node.prompt_tokens)
    except TargetError as exc:
        verification["error"] = str(exc)
    verification["sampled"] = len(deviations)
    verification["deviations"] = deviations
    return info
