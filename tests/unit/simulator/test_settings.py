"""The simulator process' settings (msgspec, no pydantic) hold what the validated models hold."""

from __future__ import annotations

import msgspec
import pytest

from veeksha.scenario.simulator import FaultConfig, SimulatorConfig, SimulatorModel
from veeksha.simulator.settings import FaultSettings, ModelSettings, SimSettings

CONFIGS = [
    SimulatorConfig(),
    SimulatorConfig(preset="realistic", decode_step_ms=3, tokenizer="subword"),
    SimulatorConfig.model_validate(
        {
            "model": "a",
            "ttft_ms": 20,
            "itl_ms": 2,
            "faults": {"http_500_rate": 0.1, "stall_rate": 0.2, "window_end_s": 5},
            "models": {
                "big": {"preset": "realistic", "max_num_seqs": 4},
                "slow": {"ttft_ms": 200, "faults": {"disconnect_rate": 0.5}},
                "a": {"itl_ms": 9},
                "vision": {"image_patch_px": 14, "reasoning_tokens": 3},
            },
        }
    ),
]


@pytest.mark.parametrize(
    ("struct", "model"),
    [(SimSettings, SimulatorConfig), (FaultSettings, FaultConfig), (ModelSettings, SimulatorModel)],
)
def test_every_field_of_the_models_and_no_other(struct: type, model: type) -> None:
    assert set(struct.__struct_fields__) == set(model.model_fields)


@pytest.mark.parametrize("config", CONFIGS)
def test_the_settings_read_as_the_config_validated_them(config: SimulatorConfig) -> None:
    settings = SimSettings.from_json(config.model_dump_json())
    assert msgspec.to_builtins(settings) == config.model_dump(mode="json")
    assert SimSettings.from_json(settings.to_json()) == settings
    assert settings.served_models() == config.served_models()
    assert settings.instant == config.instant
    assert settings.faults.any == config.faults.any
    for name in config.served_models():
        expected = config.for_model(name).model_dump(mode="json")
        assert msgspec.to_builtins(settings.for_model(name)) == expected


def test_an_unknown_or_missing_field_is_an_error() -> None:
    data = SimulatorConfig().model_dump(mode="json")
    with pytest.raises(msgspec.ValidationError, match="unknown"):
        SimSettings.from_json(msgspec.json.encode({**data, "surprise": 1}))
    del data["seed"]
    with pytest.raises(msgspec.ValidationError, match="seed"):
        SimSettings.from_json(msgspec.json.encode(data))
