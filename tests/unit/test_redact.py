"""The one masking function (``veeksha.redact.Redactor``): every form of the key, at every
offset around the cut, masked before the cut."""

from __future__ import annotations

import json
import urllib.parse

from hypothesis import given, settings
from hypothesis import strategies as st

from veeksha.redact import MASK, MIN_FRAGMENT, Redactor

KEY = "sk-ab/cd+ef=gh0123456789ijklmnopqrstuvwxyz"
SECRET = KEY[3:]


def _fragments(text: str, size: int = 8) -> set[str]:
    return {text[i : i + size] for i in range(len(text) - size + 1)}


def _leaks(out: str) -> list[str]:
    """Every 8-character piece of the secret (in any of its forms) found in ``out``."""
    forms = [
        SECRET,
        json.dumps(SECRET)[1:-1].replace("/", "\\/"),
        urllib.parse.quote(SECRET, safe=""),
        urllib.parse.quote_plus(SECRET),
    ]
    return sorted(f for form in forms for f in _fragments(form) if f in out)


def test_every_form_of_the_key_is_masked() -> None:
    redact = Redactor(KEY)
    forms = {
        "as sent": KEY,
        "json": json.dumps(KEY)[1:-1],
        "json, slash escaped": json.dumps(KEY)[1:-1].replace("/", "\\/"),
        "json, \\u escapes": "".join(f"\\u{ord(c):04x}" if c in "/+=" else c for c in KEY),
        "json, \\u escapes upper": "".join(f"\\u{ord(c):04X}" if c in "ab" else c for c in KEY),
        "url": urllib.parse.quote(KEY, safe=""),
        "url, default safe": urllib.parse.quote(KEY),
        "url, plus": urllib.parse.quote_plus(KEY),
        "url, lower-case hex": urllib.parse.quote(KEY, safe="").replace("%2F", "%2f"),
        "url, every byte": "".join(f"%{b:02X}" for b in KEY.encode()),
    }
    for name, form in forms.items():
        assert redact(f"before {form} after") == f"before {MASK} after", name


def test_a_key_with_quotes_backslashes_and_spaces_is_masked_in_json_and_urls() -> None:
    key = 'k" \\ y/0123456789'
    redact = Redactor(key)
    for form in (key, json.dumps(key)[1:-1], urllib.parse.quote_plus(key)):
        assert redact(f"<{form}>") == f"<{MASK}>", form


def test_the_key_is_masked_before_the_cut_at_every_offset() -> None:
    """A key lying across the cut (anywhere from well before it to just after) leaves no
    fragment: the cut happens after masking."""
    redact = Redactor(KEY)
    for pad in range(300 - len(KEY) - 10, 311):
        for form in (KEY, urllib.parse.quote(KEY, safe="")):
            text = "p" * pad + form + " and more text after the key"
            out = redact(text, 300)
            assert out == ("p" * pad + MASK + " and more text after the key")[:300]
            assert not _leaks(out), (pad, out)


def test_a_key_cut_by_the_sender_is_masked_at_the_end() -> None:
    redact = Redactor(KEY)
    for n in range(MIN_FRAGMENT, len(KEY)):
        assert redact("echo: " + KEY[:n]) == "echo: " + MASK, n
    assert redact("echo: " + KEY[: MIN_FRAGMENT - 1]) == "echo: " + KEY[: MIN_FRAGMENT - 1]


def test_the_mask_does_not_tell_the_key_length() -> None:
    short, long = "sk-" + "a" * 20, "sk-" + "a" * 60
    assert Redactor(short)(f"x {short} y") == Redactor(long)(f"x {long} y") == f"x {MASK} y"


def test_without_a_key_it_only_cuts() -> None:
    assert Redactor(None)("abc " * 100, 10) == "abc abc ab"
    assert Redactor("")("abc") == "abc"


def test_many_keys_in_a_row_are_all_masked() -> None:
    out = Redactor(KEY)((KEY + urllib.parse.quote(KEY, safe="")) * 50 + "end", 300)
    assert set(out) == {"*"}


def test_repr_hides_the_key() -> None:
    assert KEY not in repr(Redactor(KEY))


_pieces = st.lists(
    st.one_of(
        st.text(alphabet="ab/%+\\uxyz0123456789 ", max_size=40),
        st.sampled_from(
            [KEY, urllib.parse.quote(KEY, safe=""), json.dumps(KEY)[1:-1], KEY[:20], KEY[5:]]
        ),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(pieces=_pieces, limit=st.integers(0, 400))
def test_masking_a_window_shows_what_masking_everything_would(
    pieces: list[str], limit: int
) -> None:
    """The cut path masks only a window of a long text; what it shows is what masking the
    whole text and then cutting shows."""
    text = "".join(pieces)
    redact = Redactor(KEY)
    assert redact(text, limit) == redact(text)[:limit]


def test_the_secrets_of_an_environment_are_its_variables_named_so() -> None:
    from veeksha.redact import Redactors, secret_values

    environ = {
        "VLLM_API_KEY": "sk-abcdefgh12",
        "HF_TOKEN": "hf_abcdefgh34",
        "AWS_SECRET_ACCESS_KEY": "aws/abcdefgh56",
        "DB_PASSWORD": "pw-abcdefgh78",
        "SHORT_TOKEN": "true",  # (too short to be one: masking it would garble every line)
        "TOKENIZERS_PARALLELISM": "false-ish-value",  # (TOKENIZERS is not TOKEN)
        "PATH": "/usr/bin:/bin",
    }
    found = secret_values(environ)
    assert found == ["sk-abcdefgh12", "hf_abcdefgh34", "aws/abcdefgh56", "pw-abcdefgh78"]
    redact = Redactors([None, *found, "sk-abcdefgh12"])
    line = "k=sk-abcdefgh12 t=hf_abcdefgh34 a=aws%2Fabcdefgh56 p=pw-abcdefgh78 tp=false-ish-value"
    assert redact(line) == "k=*** t=*** a=*** p=*** tp=false-ish-value"
    assert redact(line, limit=5) == "k=***"
