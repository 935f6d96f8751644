"""Session graphs: the shape of a session's request DAG, its agents and answer validations."""

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from veeksha.scenario.base import StrictModel, empty_dict, empty_list, factory
from veeksha.scenario.generators import (
    FixedInterval,
    FixedLength,
    IntervalGenerator,
    LengthGenerator,
    PoissonInterval,
    _uniform,
    zero_output_problem,
)

# --------------------------------------------------------------------------------- session graphs


class RegexValidation(StrictModel):
    """The answer must contain a match of ``pattern`` (Python ``re.search``)."""

    type: Literal["regex"] = "regex"
    pattern: str = Field(..., min_length=1, description="A Python regular expression.")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


class JsonValidation(StrictModel):
    """The answer must parse as JSON."""

    type: Literal["json"] = "json"


class ChoicesValidation(StrictModel):
    """The answer (stripped) must be one of ``choices``."""

    type: Literal["choices"] = "choices"
    choices: list[str] = Field(..., min_length=1, description="The accepted answers.")


Validation = Annotated[
    RegexValidation | JsonValidation | ChoicesValidation, Field(discriminator="type")
]


def _validation() -> Any:
    return Field(None, description="A check of the nodes' answers; a failing one is re-sent.")


def _max_reprompts() -> Any:
    return Field(2, ge=0, le=100, description="Re-prompts per node at most.")


def _validation_probability() -> Any:
    return Field(
        1.0,
        ge=0,
        le=1,
        description="Share of the LLM nodes checked (drawn from the validation random stream).",
    )


class SingleRequestGraph(StrictModel):
    """One node, no edges."""

    type: Literal["single_request"] = "single_request"
    validation: Validation | None = _validation()
    max_reprompts: int = _max_reprompts()
    validation_probability: float = _validation_probability()


class LinearGraph(StrictModel, defer_build=False):
    """A chain of turns: a multi-turn conversation."""

    type: Literal["linear"] = "linear"
    num_request_generator: LengthGenerator = Field(
        default_factory=lambda: _uniform(6, 12), description="Turns per session."
    )
    request_wait_generator: IntervalGenerator = Field(
        default_factory=factory(PoissonInterval),
        description="Think time before each non-root turn, after its parent completes.",
    )
    inherit_history: bool = Field(True, description="Each turn carries the conversation so far.")
    validation: Validation | None = _validation()
    max_reprompts: int = _max_reprompts()
    validation_probability: float = _validation_probability()


class BranchingGraph(StrictModel):
    """A layered DAG: an agentic workflow with fan-out, fan-in and skip connections."""

    type: Literal["branching"] = "branching"
    num_layers_generator: LengthGenerator = Field(
        default_factory=lambda: _uniform(2, 5), description="Depth (layers)."
    )
    layer_width_generator: LengthGenerator = Field(
        default_factory=lambda: _uniform(1, 3), description="Width, sampled per layer."
    )
    fan_out_generator: LengthGenerator = Field(
        default_factory=lambda: _uniform(1, 2),
        description="Forward edges tried per node (duplicates collapse).",
    )
    fan_in_generator: LengthGenerator = Field(
        default_factory=lambda: _uniform(1, 2),
        description="Minimum parents per non-root node, capped at the previous layer's width.",
    )
    connection_dist_generator: LengthGenerator = Field(
        default_factory=lambda: FixedLength(type="fixed", value=1),
        description="Forward skip distance in layers (1 = next layer), capped at the last layer.",
    )
    request_wait_generator: IntervalGenerator = Field(
        default_factory=factory(PoissonInterval),
        description="Think time after all parents complete.",
    )
    inherit_history: bool = Field(
        True, description="Exactly one parent per non-root node is its history parent."
    )
    single_root: bool = Field(True, description="Layer 0 has exactly one node.")
    tool_probability: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of non-root nodes that are tool calls (no request; docs/agents.md).",
    )
    tool_latency_generator: IntervalGenerator = Field(
        default_factory=lambda: FixedInterval(type="fixed", interval=0.05),
        description="A tool call's duration in seconds; its result has the node's prompt length.",
    )
    validation: Validation | None = _validation()
    max_reprompts: int = _max_reprompts()
    validation_probability: float = _validation_probability()


_AGENT_ID = r"^[A-Za-z][A-Za-z0-9_-]*$"


class Agent(StrictModel):
    """One agent of an ``agent_rounds`` graph: it speaks once per round."""

    id: str = Field(..., pattern=_AGENT_ID, max_length=64, description="Unique agent name.")
    role: str = Field("participant", description="Free text, recorded (e.g. moderator).")
    kind: Literal["llm", "tool"] = Field(
        "llm",
        description="llm: a request to its client; tool: no request, a latency and a result of "
        "result_length tokens (docs/agents.md).",
    )
    client: str | None = Field(
        None,
        description="Name of the client serving it (null: its role's client in role_clients, "
        "else the first client).",
    )
    priority: int = Field(0, description="runtime.priority node: higher first.")
    prompt_length_generator: LengthGenerator | None = Field(
        None, description="New prompt tokens per turn (null: the channel's body lengths)."
    )
    output_length_generator: LengthGenerator | None = Field(
        None,
        description="Answer tokens per turn, at least 1 (null: output_spec's).",
    )
    latency_generator: IntervalGenerator | None = Field(
        None, description="tool: the call's duration in seconds (null: fixed 0)."
    )
    result_length_generator: LengthGenerator | None = Field(
        None,
        description="tool: tokens of its result, at least 1 (null: output_spec's lengths).",
    )
    speak_after_within_round: list[str] = Field(
        default_factory=empty_list, description="Agents of the same round it waits for (their ids)."
    )
    validation: Validation | None = Field(
        None, description="A check of its answers; a failing answer is re-sent (re-prompt)."
    )
    max_reprompts: int = Field(2, ge=0, le=100, description="Re-prompts per turn at most.")

    @field_validator("output_length_generator")
    @classmethod
    def _at_least_one(cls, value: Any) -> Any:
        problem = None if value is None else zero_output_problem(value)
        if problem is not None:
            raise problem
        return value

    @field_validator("result_length_generator")
    @classmethod
    def _a_result_of_one_token_at_least(cls, value: Any) -> Any:
        # (the rule of output lengths: a drawn 0 was raised to 1 token, unlike what was written)
        fix = "a tool's result is at least 1 token, the text its children receive"
        problem = None if value is None else zero_output_problem(value, fix)
        if problem is not None:
            raise problem
        return value


class AgentRoundsGraph(StrictModel):
    """Rounds of agents: each round every agent speaks once, after the agents it names in
    ``speak_after_within_round``; round r+1 starts when round r has ended and sees its
    transcript."""

    type: Literal["agent_rounds"] = "agent_rounds"
    agents: list[Agent] = Field(..., min_length=1, description="The agents, in speaking order.")
    rounds: int = Field(3, ge=1, le=10_000, description="Rounds per session.")
    role_clients: dict[str, str] = Field(
        default_factory=empty_dict,
        description="Role → client name: the client of the agents of that role that name none.",
    )
    request_wait_generator: IntervalGenerator = Field(
        default_factory=lambda: FixedInterval(type="fixed", interval=0.0),
        description="Think time after a turn's parents completed.",
    )


SessionGraph = Annotated[
    SingleRequestGraph | LinearGraph | BranchingGraph | AgentRoundsGraph,
    Field(discriminator="type"),
]
