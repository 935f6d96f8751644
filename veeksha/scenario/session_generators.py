"""Session generators: synthetic sessions (channels, output spec, client selection) and trace
replay with its flavors."""

import warnings
from typing import Annotated, Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from veeksha.scenario.base import KeyProblem, StrictModel, factory
from veeksha.scenario.generators import (
    MAX_DRAW,
    ChoiceLength,
    FixedLength,
    FixedStairLength,
    LengthGenerator,
    NormalLength,
    UniformLength,
    ZipfLength,
    _uniform,
    zero_output_problem,
)
from veeksha.scenario.graphs import (
    AgentRoundsGraph,
    LinearGraph,
    SessionGraph,
    Validation,
    _max_reprompts,
    _validation,
    _validation_probability,
)

# ------------------------------------------------------------------------------ session generator

#: The largest side of an image the image channel draws (veeksha.generate.images.MAX_SIDE)
MAX_IMAGE_SIDE = 16_384


class TextChannel(StrictModel, defer_build=False):
    """Text prompt content: body lengths and shared prefixes."""

    type: Literal["text"] = "text"
    body_length_generator: LengthGenerator = Field(
        default_factory=lambda: _uniform(6, 12),
        description="Tokens of the new user message of each request.",
    )
    shared_prefix_ratio: float = Field(
        0.0, ge=0, le=1, description="Fraction of a root request's body taken from a shared prefix."
    )
    shared_prefix_probability: float = Field(
        1.0, ge=0, le=1, description="Probability that a root request uses the shared prefix."
    )
    shared_prefix_tokens: int | None = Field(
        None,
        ge=1,
        description="Tokens of a root request's body taken from a shared prefix (at most the "
        "body), instead of shared_prefix_ratio.",
    )
    shared_prefix_count: int = Field(
        1,
        ge=1,
        le=100_000,
        description="Distinct shared prefixes (tenants, system prompts); a root that uses one "
        "opens with one of them, each as likely.",
    )

    @model_validator(mode="after")
    def _one_prefix_length(self) -> Self:
        if self.shared_prefix_tokens is not None and self.shared_prefix_ratio > 0:
            raise KeyProblem(
                "give the shared prefix's length once: shared_prefix_tokens or "
                "shared_prefix_ratio, not both",
                "shared_prefix_tokens",
                "shared_prefix_ratio",
            )
        return self


class ImageChannel(StrictModel, defer_build=False):
    """Images in the user's messages, for vision-language models: each request that starts a
    conversation (or every request, ``every_turn``) carries its own images, of the drawn
    sizes, as data: URLs in its chat message; a conversation's later turns send them again
    with its history (docs/scenario.md, "Images")."""

    type: Literal["image"] = "image"
    count_generator: LengthGenerator = Field(
        default_factory=lambda: FixedLength(value=1),
        description="Images of each request that carries images (0: none for that request).",
    )
    width_generator: LengthGenerator = Field(
        default_factory=lambda: FixedLength(value=512),
        description="Width of each image in pixels (1 to 16384).",
    )
    height_generator: LengthGenerator = Field(
        default_factory=lambda: FixedLength(value=512),
        description="Height of each image in pixels (1 to 16384).",
    )
    every_turn: bool = Field(
        False,
        description="Images in every request's new message too, not only where a conversation"
        " starts (a request without a history parent).",
    )

    @field_validator("width_generator", "height_generator")
    @classmethod
    def _a_side(cls, value: Any) -> Any:
        problem = zero_output_problem(value, "an image is at least 1 pixel a side")
        if problem is not None:
            raise problem
        for key, drawn in _bounds(value):
            if drawn > MAX_IMAGE_SIDE:
                raise KeyProblem(
                    f"must be at most {MAX_IMAGE_SIDE}: an image is at most {MAX_IMAGE_SIDE}"
                    f" pixels a side (got {drawn})",
                    key,
                )
        return value


def _bounds(generator: Any) -> list[tuple[str | tuple[str, int], int]]:
    """The keys of a length generator that bound its draws, with their values (none for an
    unbounded one: its draws are cut to the largest side)."""
    if isinstance(generator, FixedLength):
        return [("value", generator.value)]
    if isinstance(generator, UniformLength | ZipfLength):
        return [("max", generator.max)]
    if isinstance(generator, FixedStairLength | ChoiceLength):
        return [(("values", i), v) for i, v in enumerate(generator.values)]
    if isinstance(generator, NormalLength) and generator.max is not None:
        return [("max", generator.max)]
    return []


Channel = Annotated[TextChannel | ImageChannel, Field(discriminator="type")]


def _text_only() -> list[TextChannel | ImageChannel]:
    return [TextChannel()]


class TextOutputSpec(StrictModel, defer_build=False):
    """Requested output length of text responses."""

    output_length_generator: LengthGenerator = Field(
        default_factory=lambda: _uniform(6, 12),
        description="Requested output tokens per request (at least 1: a generator that can draw"
        " 0 is refused).",
    )

    @field_validator("output_length_generator")
    @classmethod
    def _at_least_one(cls, value: Any) -> Any:
        problem = zero_output_problem(value)
        if problem is not None:
            raise problem
        return value


class OutputSpec(StrictModel, defer_build=False):
    """What each request asks the server to produce."""

    text: TextOutputSpec = Field(
        default_factory=factory(TextOutputSpec), description="Requested length of text responses."
    )


class RoundRobinClients(StrictModel, defer_build=False):
    """Node ``j`` of session ``i`` goes to client ``(i + j) mod n`` (in ``clients:`` order)."""

    type: Literal["round_robin"] = "round_robin"


class WeightedClients(StrictModel):
    """Each node draws its client with these weights (the ``clients`` random stream)."""

    type: Literal["weighted"] = "weighted"
    weights: dict[str, Annotated[float, Field(ge=0)]] = Field(
        ..., min_length=1, description="Client name → relative weight (unnamed clients: 0)."
    )

    @model_validator(mode="after")
    def _some_weight(self) -> Self:
        if sum(self.weights.values()) <= 0:
            raise KeyProblem("at least one client needs a weight above 0", "weights")
        return self


ClientSelection = Annotated[RoundRobinClients | WeightedClients, Field(discriminator="type")]


class LengthPair(StrictModel):
    """One request size of a mix: its new prompt tokens and output tokens, drawn together."""

    input: int = Field(..., ge=0, le=MAX_DRAW, description="New prompt tokens (the text body).")
    output: int = Field(..., ge=1, le=MAX_DRAW, description="Output tokens asked.")
    weight: float = Field(
        1.0, ge=0, allow_inf_nan=False, description="Its share of the draws (any scale)."
    )


class SyntheticSessionGenerator(StrictModel, defer_build=False):
    """Sessions generated from a graph shape, content channels and an output spec."""

    type: Literal["synthetic"] = "synthetic"
    session_graph: SessionGraph = Field(
        default_factory=factory(LinearGraph), description="Shape of each session's request DAG."
    )
    channels: list[Channel] = Field(
        default_factory=_text_only,
        min_length=1,
        description="Prompt content: one text channel, and at most one image channel.",
    )
    output_spec: OutputSpec = Field(
        default_factory=factory(OutputSpec),
        description="What each request asks the server to produce.",
    )
    client_selection: ClientSelection = Field(
        default_factory=factory(RoundRobinClients),
        description="Which of several clients serves each node (one client: all of them).",
    )
    length_pairs: list[LengthPair] | None = Field(
        None,
        min_length=1,
        description="Request sizes drawn as (input, output) pairs by weight, as AIPerf's "
        "--sequence-distribution: each node's body length and output length together (they "
        "replace body_length_generator and output_length_generator); null: drawn apart.",
    )

    @model_validator(mode="after")
    def _pairs_draw_both(self) -> Self:
        pairs = self.length_pairs
        if pairs is None:
            return self
        if not sum(pair.weight for pair in pairs) > 0:
            raise KeyProblem("at least one pair needs a weight above 0", "length_pairs")
        if isinstance(self.session_graph, AgentRoundsGraph):
            raise KeyProblem(
                "an agent_rounds graph sizes its turns by its agents' generators: remove "
                "length_pairs",
                "length_pairs",
            )
        drawn = "length_pairs draws it with the output length: remove one of them"
        for i, channel in enumerate(self.channels):
            if isinstance(channel, TextChannel) and "body_length_generator" in (
                channel.model_fields_set
            ):
                raise KeyProblem(drawn, ("channels", i, "body_length_generator"))
        if "output_length_generator" in self.output_spec.text.model_fields_set:
            raise KeyProblem(
                "length_pairs draws it with the body length: remove one of them",
                ("output_spec", "text", "output_length_generator"),
            )
        return self


class RequestLogFlavor(StrictModel):
    """Rows of input_length/output_length (aliases num_prefill_tokens/num_decode_tokens);
    optional session_id (a linear chat) and timestamp/arrival_time (seconds)."""

    type: Literal["request_log"] = "request_log"


class TimedSyntheticSessionFlavor(StrictModel):
    """Rows of session_id, new_input_length (or input_length), output_length and an optional
    session_context {node_id, parent_nodes, history_parent, wait_after_ready}: any DAG; veeksha's
    own trace.jsonl is one."""

    type: Literal["timed_synthetic_session"] = "timed_synthetic_session"
    corpus_file: str | None = Field(
        None, description="Accepted and ignored: prompts come from the built-in corpus."
    )
    page_size: int | None = Field(
        None, ge=1, description="Accepted and ignored (upstream's lineage prefix size)."
    )

    @model_validator(mode="after")
    def _ignored(self) -> Self:
        for key in ("corpus_file", "page_size"):
            if getattr(self, key) is not None:
                warnings.warn(
                    f"session_generator.flavor.{key} is ignored: prompts are built from the"
                    " built-in corpus, exact in tokens",
                    UserWarning,
                    stacklevel=2,
                )
        return self


class UntimedContentMultiTurnFlavor(StrictModel):
    """Real conversations, one row each, in the ShareGPT shape: each user turn is a request with
    the dataset's text, the reply's token count is its output length (docs/traces.md)."""

    type: Literal["untimed_content_multi_turn"] = "untimed_content_multi_turn"
    conversation_column: str = Field("conversations", description="The row's list of messages.")
    role_key: str = Field("from", description="A message's role key.")
    content_key: str = Field("value", description="A message's text key.")
    user_role_value: str = Field("human", description="The user's role value.")
    assistant_role_value: str = Field("gpt", description="The assistant's role value.")
    system_role_value: str = Field("system", description="The system prompt's role value.")


class PromptsFlavor(StrictModel):
    """Your own prompts, one request each: rows of prompt (alias text), an optional
    output_length and system message (docs/traces.md); vLLM's custom dataset, guidellm's and
    AIPerf's prompt files."""

    type: Literal["prompts"] = "prompts"
    output_length: int = Field(
        256, ge=1, le=MAX_DRAW, description="Output tokens asked of a row without output_length."
    )


class SharedPrefixFlavor(StrictModel):
    """Rows with hash_ids (Mooncake style): equal ids are identical token blocks across sessions,
    so a prefix cache sees the trace's real sharing (docs/traces.md)."""

    type: Literal["shared_prefix"] = "shared_prefix"
    block_size: int = Field(512, ge=1, le=MAX_DRAW, description="Tokens of one hash id's block.")


class RagFlavor(StrictModel):
    """Rows of doc_id, prompt_text, input_length (the document's tokens) and output_length: the
    num_documents most frequent documents, each warmed up once before the measured run."""

    type: Literal["rag"] = "rag"
    num_documents: int = Field(16, ge=1, description="The most frequent documents replayed.")
    block_size: int = Field(512, ge=1, le=MAX_DRAW, description="Tokens of one document block.")


class MooncakeFlavor(StrictModel):
    """The Mooncake (FAST'25) trace: JSON lines of timestamp (ms), input_length, output_length,
    hash_ids (blocks of block_size tokens) and an optional session_id."""

    type: Literal["mooncake"] = "mooncake"
    block_size: int = Field(512, ge=1, le=MAX_DRAW, description="Tokens of one hash id's block.")


class AzureLlmFlavor(StrictModel):
    """The Azure LLM inference trace (2023, 2024): CSV of TIMESTAMP (a date and time),
    ContextTokens, GeneratedTokens."""

    type: Literal["azure_llm"] = "azure_llm"


class BurstGptFlavor(StrictModel):
    """The BurstGPT trace: CSV of Timestamp (s), Model, Request tokens, Response tokens, Total
    tokens, Log Type; failed rows (0 response tokens) are counted and not replayed."""

    type: Literal["burstgpt"] = "burstgpt"


class AutoFlavor(StrictModel, defer_build=False):
    """The flavor told from the file's header or first line (docs/traces.md); when nothing is
    distinctive, timed_synthetic_session."""

    type: Literal["auto"] = "auto"


TraceFlavor = Annotated[
    RequestLogFlavor
    | TimedSyntheticSessionFlavor
    | UntimedContentMultiTurnFlavor
    | PromptsFlavor
    | SharedPrefixFlavor
    | RagFlavor
    | MooncakeFlavor
    | AzureLlmFlavor
    | BurstGptFlavor
    | AutoFlavor,
    Field(discriminator="type"),
]


class TraceSessionGenerator(StrictModel):
    """Replay of a trace file (CSV, JSONL or a JSON array; docs/traces.md)."""

    type: Literal["trace"] = "trace"
    trace_file: str = Field(..., description="Path of the trace (relative: to the current folder).")
    flavor: TraceFlavor = Field(
        default_factory=factory(AutoFlavor),
        description="What the rows are (a bare name is accepted: flavor: request_log).",
    )
    wrap_mode: bool = Field(
        True,
        description="At the end of the trace, start over (fresh session ids, reshuffled); "
        "false: the run ends with the trace.",
    )
    oversized: Literal["skip", "truncate", "send"] = Field(
        "skip",
        description="A request longer than client.max_model_len (prompt, history and output; "
        "with clients:, its own client's): "
        "skip (its session is not replayed; counted), truncate (its output, then a lone "
        "request's prompt, clipped to fit), send (sent as is; the server refuses it).",
    )
    client_selection: ClientSelection | None = Field(
        None,
        description="With several clients, which one serves a row that names none (no client"
        " column, or an empty value): round_robin (node j of the trace's session i: client"
        " (i + j) mod n) or weighted; absent: the first client. A row's own client wins.",
    )

    validation: Validation | None = _validation()
    max_reprompts: int = _max_reprompts()
    validation_probability: float = _validation_probability()

    @field_validator("flavor", mode="before")
    @classmethod
    def _bare_flavor_name(cls, value: Any) -> Any:
        return {"type": value} if isinstance(value, str) else value


SessionGenerator = Annotated[
    SyntheticSessionGenerator | TraceSessionGenerator, Field(discriminator="type")
]
