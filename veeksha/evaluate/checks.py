"""The health checks veeksha runs after every run, in report order, and the function running them.

Adding a check means writing one ``HealthCheck`` (see ``veeksha.evaluate.health``) and listing it
here; nothing registers itself.
"""

from __future__ import annotations

from veeksha.evaluate.answer_checks import ANSWERED
from veeksha.evaluate.arrival_checks import ARRIVAL_DISTRIBUTION, DISPATCH_RATE
from veeksha.evaluate.clock_checks import CLOCK_SYNC
from veeksha.evaluate.generator_checks import GENERATOR_SATURATION, LIFECYCLE_DELAYS
from veeksha.evaluate.health import HealthCheck, HealthInput, HealthReport
from veeksha.evaluate.number_checks import SERVER_NUMBERS
from veeksha.evaluate.request_checks import DEPENDENCIES, OUTPUT_LENGTH, PROMPT_LENGTH
from veeksha.evaluate.server_checks import SERVER_AGREEMENT
from veeksha.evaluate.source import release_memory
from veeksha.evaluate.trace_sharing import PREFIX_SHARING

__all__ = ["HEALTH_CHECKS", "run_health_checks"]

HEALTH_CHECKS: tuple[HealthCheck, ...] = (
    ANSWERED,
    DISPATCH_RATE,
    ARRIVAL_DISTRIBUTION,
    DEPENDENCIES,
    PROMPT_LENGTH,
    OUTPUT_LENGTH,
    SERVER_NUMBERS,
    PREFIX_SHARING,
    LIFECYCLE_DELAYS,
    GENERATOR_SATURATION,
    SERVER_AGREEMENT,
    CLOCK_SYNC,
)


def run_health_checks(
    data: HealthInput, checks: tuple[HealthCheck, ...] = HEALTH_CHECKS
) -> HealthReport:
    """Run ``checks`` on ``data``; the report's verdict is PASS unless one FAILs."""
    results = []
    for check in checks:
        results.append(check(data))
        release_memory()  # each check's columns are gone: keep the next one's peak the only one
    return HealthReport(tuple(results))
