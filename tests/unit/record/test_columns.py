"""The column schemas: self-describing, and docs/output.md generated from them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from veeksha.record.columns import (
    REQUESTS_SCHEMA,
    SESSIONS_SCHEMA,
    column_unit,
    render_markdown,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "output.md"


@pytest.mark.parametrize("schema", [REQUESTS_SCHEMA, SESSIONS_SCHEMA])
def test_every_column_has_unit_and_description(schema: pa.Schema) -> None:
    for field in schema:
        assert field.metadata is not None, field.name
        assert b"unit" in field.metadata, field.name
        assert field.metadata[b"description"], field.name
    assert len(set(schema.names)) == len(schema.names)


def test_units_of_key_columns() -> None:
    assert column_unit(REQUESTS_SCHEMA, "ttfc") == "s"
    assert column_unit(REQUESTS_SCHEMA, "sent_at") == "s since t0"
    assert column_unit(REQUESTS_SCHEMA, "output_throughput") == "tokens/s"
    assert column_unit(REQUESTS_SCHEMA, "output_tokens") == "tokens"
    assert column_unit(REQUESTS_SCHEMA, "status") == ""
    assert REQUESTS_SCHEMA.field("chunk_times").type == pa.list_(pa.float64())
    assert REQUESTS_SCHEMA.field("parents").type == pa.list_(pa.int32())


def test_output_doc_is_fresh() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert render_markdown() in text, (
        "docs/output.md is stale: run `python -m veeksha.record.columns docs/output.md`"
    )
