"""Settings of the built-in simulated LLM server (the `simulator:` section of a scenario).

Owned by the simulator (veeksha/simulator/); kept here so the scenario package imports nothing
from the runtime. See docs/simulator.md for the engine model these numbers drive.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SimulatorConfig"]


class SimulatorConfig(BaseModel):
    """Timing model, capacity and faults of the built-in OpenAI-compatible server."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    preset: Literal["fast", "realistic"] = Field(
        "fast", description="fast: no delays; realistic: timing in the spirit of an 8B model."
    )
    model: str = Field("veeksha-sim", description="Model name the simulator serves.")
    processes: int = Field(1, ge=1, description="Server processes (SO_REUSEPORT).")
