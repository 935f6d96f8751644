"""Shared fixtures: a tiny Hugging Face tokenizer.json built locally (never downloaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from veeksha.generate.tokenizer import BUILTIN_VOCAB

TRAINING_TEXT = [" ".join(BUILTIN_VOCAB[i : i + 50]) for i in range(0, len(BUILTIN_VOCAB), 50)]


def _save(tokenizer: object, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tokenizer.json"
    tokenizer.save(str(path))  # type: ignore[attr-defined]
    return path


@pytest.fixture(scope="session")
def wordlevel_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A WordLevel tokenizer (one token per known word) trained on the builtin vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(TRAINING_TEXT, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    return _save(tok, tmp_path_factory.mktemp("wordlevel"))


@pytest.fixture(scope="session")
def bpe_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small byte-level BPE, so words split into varying numbers of tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(TRAINING_TEXT, trainer)
    return _save(tok, tmp_path_factory.mktemp("bpe"))
