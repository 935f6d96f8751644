"""Interval generators (gaps in seconds) and length generators (token and count draws)."""

from typing import Annotated, Literal, Self

from pydantic import AliasChoices, Field, model_validator

from veeksha.scenario.base import KeyProblem, Seconds, StrictModel

# --------------------------------------------------------------------------- interval generators


class PoissonInterval(StrictModel, defer_build=False):
    """Exponential gaps with mean 1/arrival_rate (a Poisson process), not truncated."""

    type: Literal["poisson"] = "poisson"
    arrival_rate: float = Field(1.0, gt=0, description="Mean events per second.")


class GammaInterval(StrictModel):
    """Gamma-distributed gaps: mean 1/arrival_rate, shape k = 1/cv² (give cv or shape)."""

    type: Literal["gamma"] = "gamma"
    arrival_rate: float = Field(1.0, gt=0, description="Mean events per second.")
    # (bounded: cv² of 1e-300 is 0, of 1e300 infinite, and k = 1/cv² divides by it)
    cv: float | None = Field(
        None, ge=1e-6, le=10**6, description="Coefficient of variation of the gaps (default 0.5)."
    )
    shape: float | None = Field(
        None,
        ge=1e-12,
        le=10**12,
        description="Gamma shape k; higher means less variance. Excludes cv.",
    )

    @model_validator(mode="after")
    def _cv_or_shape(self) -> Self:
        if self.cv is not None and self.shape is not None:
            raise KeyProblem("give either cv or shape, not both (shape = 1/cv²)", "shape", "cv")
        return self

    @property
    def effective_shape(self) -> float:
        """The gamma shape k implied by ``shape`` or ``cv`` (cv 0.5 → k 4 by default)."""
        if self.shape is not None:
            return self.shape
        cv = self.cv if self.cv is not None else 0.5
        return 1.0 / (cv * cv)


class FixedInterval(StrictModel, defer_build=False):
    """A constant gap; 0 releases everything at once (an offline burst)."""

    type: Literal["fixed"] = "fixed"
    interval: Seconds = Field(1.0, ge=0, description="Seconds between events.")


IntervalGenerator = Annotated[
    PoissonInterval | GammaInterval | FixedInterval, Field(discriminator="type")
]


# ----------------------------------------------------------------------------- length generators

#: The largest value a length generator may give: 2**24 tokens (or requests, layers...). No
#: model's context is longer, and a larger draw is a typo that would exhaust the memory while
#: the prompts are built (10**12) or overflow the arrays holding the draws (10**30).
MAX_DRAW = 1 << 24


class FixedLength(StrictModel, defer_build=False):
    """Always the same value."""

    type: Literal["fixed"] = "fixed"
    value: int = Field(8, ge=0, le=MAX_DRAW, description="The constant value.")


class UniformLength(StrictModel, defer_build=False):
    """Integer uniform on [min, max], both bounds inclusive."""

    type: Literal["uniform"] = "uniform"
    min: int = Field(6, ge=0, le=MAX_DRAW, description="Smallest value (inclusive).")
    max: int = Field(12, ge=0, le=MAX_DRAW, description="Largest value (inclusive).")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.min > self.max:
            raise KeyProblem(f"must be <= max (got min={self.min}, max={self.max})", "min", "max")
        return self


class ZipfLength(StrictModel):
    """Bounded Zipfian over [min, max]: P(rank r) ∝ 1/r^theta; small values most likely."""

    type: Literal["zipf"] = "zipf"
    min: int = Field(6, ge=0, le=MAX_DRAW, description="Smallest value (inclusive).")
    max: int = Field(12, ge=0, le=MAX_DRAW, description="Largest value (inclusive).")
    theta: float = Field(
        0.6,
        gt=0,
        validation_alias=AliasChoices("theta", "alpha"),
        description="Skew exponent (alias: alpha).",
    )
    scramble: bool = Field(
        False, description="Spread the popular ranks over the range instead of favouring min."
    )

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.min > self.max:
            raise KeyProblem(f"must be <= max (got min={self.min}, max={self.max})", "min", "max")
        return self


class FixedStairLength(StrictModel):
    """Each value repeat_each times in order, then cycle (wrap) or stay on the last."""

    type: Literal["fixed_stair"] = "fixed_stair"
    values: list[Annotated[int, Field(ge=0, le=MAX_DRAW)]] = Field(
        ..., min_length=1, description="The steps, in order."
    )
    repeat_each: int = Field(1, ge=1, le=MAX_DRAW, description="Draws per step.")
    wrap: bool = Field(True, description="Start over after the last step (else stay on it).")


class InverseGaussianLength(StrictModel):
    """Wald (inverse Gaussian) distribution, rounded, at least 1."""

    type: Literal["inverse_gaussian"] = "inverse_gaussian"
    mean: float = Field(500.0, gt=0, le=MAX_DRAW, description="Mean of the distribution.")
    shape: float = Field(300.0, gt=0, description="Shape λ; higher means less variance.")


class NormalLength(StrictModel):
    """Normal (Gaussian) with the given mean and standard deviation, rounded and clipped to
    [min, max] (a draw outside is the bound, not drawn again)."""

    type: Literal["normal"] = "normal"
    mean: float = Field(..., ge=0, le=MAX_DRAW, description="Mean of the distribution.")
    std: float = Field(
        ...,
        ge=0,
        le=MAX_DRAW,
        validation_alias=AliasChoices("std", "stddev"),
        description="Standard deviation (alias: stddev); 0: always the mean, rounded.",
    )
    min: int = Field(1, ge=0, le=MAX_DRAW, description="Smallest value; a draw below is min.")
    max: int | None = Field(
        None, ge=0, le=MAX_DRAW, description="Largest value; a draw above is max (null: none)."
    )

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max is not None and self.min > self.max:
            raise KeyProblem(f"must be <= max (got min={self.min}, max={self.max})", "min", "max")
        return self


class ChoiceLength(StrictModel):
    """One of the given values, each with its weight's share of the draws (equal without
    weights): a mix of request sizes, as 80 % short and 20 % long."""

    type: Literal["choice"] = "choice"
    values: list[Annotated[int, Field(ge=0, le=MAX_DRAW)]] = Field(
        ..., min_length=1, description="The values to draw from."
    )
    weights: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = Field(
        None,
        description="Each value's weight, in the same order (any scale: 80, 20 or 0.8, 0.2); "
        "null: all alike.",
    )

    @model_validator(mode="after")
    def _weighted(self) -> Self:
        weights = self.weights
        if weights is None:
            return self
        if len(weights) != len(self.values):
            raise KeyProblem(
                f"one weight per value: {len(self.values)} values, {len(weights)} weights",
                "weights",
            )
        if not sum(weights) > 0:
            raise KeyProblem("at least one weight must be more than 0", "weights")
        return self


#: every kind of length generator (``LengthGenerator`` picks one by its ``type``)
AnyLength = (
    FixedLength
    | UniformLength
    | ZipfLength
    | FixedStairLength
    | InverseGaussianLength
    | NormalLength
    | ChoiceLength
)
LengthGenerator = Annotated[AnyLength, Field(discriminator="type")]


def _uniform(lo: int, hi: int) -> UniformLength:
    return UniformLength(type="uniform", min=lo, max=hi)


def zero_output_problem(
    generator: AnyLength,
    fix: str = "a request asks for at least 1 output token",
) -> KeyProblem | None:
    """The complaint about an output-length generator that can draw 0, at the key that allows
    it (None: every draw is at least 1). A request asks for at least one output token (and a
    tool's result is at least one token: ``fix`` says which); an inverse_gaussian draw is at
    least 1 by construction (rounded, then raised to 1)."""
    if isinstance(generator, FixedLength) and generator.value < 1:
        return KeyProblem(f"must be at least 1: {fix} (got {generator.value})", "value")
    if isinstance(generator, UniformLength | ZipfLength | NormalLength) and generator.min < 1:
        return KeyProblem(f"must be at least 1: {fix} (got {generator.min})", "min")
    if isinstance(generator, FixedStairLength | ChoiceLength):
        weights = getattr(generator, "weights", None)
        for index, value in enumerate(generator.values):
            drawn = weights is None or weights[index] > 0  # (a weight of 0 is never drawn)
            if value < 1 and drawn:
                return KeyProblem(f"must be at least 1: {fix} (got {value})", ("values", index))
    return None
