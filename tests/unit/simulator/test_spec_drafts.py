"""The simulator's speculative-decoding counters: each answer's tokens after its first come in
steps of a draft's accepted tokens and one more, never past the answer's end."""

from __future__ import annotations

import random

from veeksha.simulator.vllm_metrics import SpecDrafts


def _drafts(k: int, acceptance: float, *answers: int, seed: int = 1) -> SpecDrafts:
    spec = SpecDrafts(k, acceptance, random.Random(seed))
    for tokens in answers:
        spec.answered(tokens)
    return spec


def test_every_draft_accepted_yields_k_plus_one_tokens_a_step() -> None:
    spec = _drafts(3, 1.0, 9)  # 8 tokens after the first: steps of 4, 4
    assert (spec.drafts, spec.draft_tokens, spec.accepted) == (2, 6, 6)
    assert spec.by_position == [2, 2, 2]


def test_a_step_never_drafts_past_the_answers_end() -> None:
    # 1 token: no step; 2: one step that can accept nothing (its one token is the model's)
    assert (_drafts(4, 1.0, 1).drafts, _drafts(4, 1.0, 2).accepted) == (0, 0)
    spec = _drafts(4, 1.0, 4)  # 3 after the first: one step of 2 accepted and 1
    assert (spec.drafts, spec.accepted, spec.by_position) == (1, 2, [1, 1, 0, 0])


def test_nothing_accepted_is_one_token_a_step_and_the_draws_are_seeded() -> None:
    assert _drafts(2, 0.0, 11).drafts == 10
    first, again = _drafts(3, 0.6, 50, 70), _drafts(3, 0.6, 50, 70)
    assert (first.drafts, first.accepted, first.by_position) == (
        again.drafts,
        again.accepted,
        again.by_position,
    )
    assert first.accepted == sum(first.by_position)
