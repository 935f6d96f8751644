"""``veeksha sim-server``: run the built-in simulated OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

__all__ = ["load_config", "sim_server"]


def load_config(path: Path | None = None, config_json: str | None = None, **overrides: Any) -> Any:
    """A ``SimulatorConfig`` from a YAML file (a simulator map, or a scenario with a
    ``simulator:`` key) or a JSON string, with non-None ``overrides`` applied on top."""
    from pydantic import ValidationError

    from veeksha.errors import ConfigurationError
    from veeksha.scenario.simulator import SimulatorConfig

    raw: dict[str, Any] = {}
    if config_json is not None:
        import json

        raw = json.loads(config_json)
    elif path is not None:
        from ruamel.yaml import YAML

        try:
            loaded = YAML(typ="safe").load(path.read_text())
        except OSError as exc:
            raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from None
        loaded = loaded or {}
        if not isinstance(loaded, dict):
            raise ConfigurationError(f"{path}: expected a map of simulator settings")
        raw = loaded.get("simulator", loaded) if "simulator" in loaded else loaded
    raw = {**raw, **{k: v for k, v in overrides.items() if v is not None}}
    try:
        return SimulatorConfig.model_validate(raw)
    except ValidationError as exc:
        where = str(path) if path is not None else "simulator settings"
        lines = [
            f"{where}: {'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}"
            for err in exc.errors()
        ]
        raise ConfigurationError("\n".join(lines)) from None


@click.command("sim-server")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=0, show_default=True, type=int, help="Port (0: a free one).")
@click.option(
    "--preset", type=click.Choice(["fast", "realistic"]), default=None, help="Timing preset."
)
@click.option("--processes", type=click.IntRange(min=1), default=None, help="Server processes.")
@click.option(
    "--tokenizer",
    type=click.Choice(["builtin", "subword", "bytes"]),
    default=None,
    help="How it counts tokens (subword: its own, unlike veeksha's builtin one).",
)
@click.option(
    "--tokenize-api",
    type=click.Choice(["vllm", "llama_cpp"]),
    default=None,
    help="Shape of /tokenize and /detokenize.",
)
@click.option(
    "--chat-template/--no-chat-template",
    default=None,
    help="Wrap chat messages in a ChatML-like template (9 tokens a prompt, 10 a turn).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML with simulator settings (or a scenario with a simulator: section).",
)
@click.option("--config-json", hidden=True, default=None, help="Settings as JSON (internal).")
@click.option(
    "--settings-json",
    hidden=True,
    default=None,
    help="A validated config's complete JSON, read without validation (internal).",
)
@click.option(
    "--parent-pid", type=int, hidden=True, default=None, help="Stop when this process dies."
)
def sim_server(
    host: str,
    port: int,
    preset: str | None,
    processes: int | None,
    tokenizer: str | None,
    tokenize_api: str | None,
    chat_template: bool | None,
    config_path: Path | None,
    config_json: str | None,
    settings_json: str | None,
    parent_pid: int | None,
) -> None:
    """Serve the simulated OpenAI-compatible LLM server; prints its base URL, stops on Ctrl-C.

    See docs/simulator.md for the timing model, presets and fault injection.
    """
    from veeksha.simulator.runner import serve
    from veeksha.simulator.settings import SimSettings

    if settings_json is not None:  # (``SimulatorProcess``: no pydantic in this process)
        settings = SimSettings.from_json(settings_json)
    else:
        config = load_config(
            config_path,
            config_json,
            preset=preset,
            processes=processes,
            tokenizer=tokenizer,
            tokenize_api=tokenize_api,
            chat_template=chat_template,
        )
        settings = SimSettings.from_json(config.model_dump_json())
    serve(settings, host, port, parent_pid=parent_pid)
