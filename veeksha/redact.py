"""Masking the API key in text that came from elsewhere: a server's error body, an in-stream
``error`` event, an exception's message, a set-up call's answer.

A server or proxy that echoes the request's headers puts the key into what veeksha records.
:class:`Redactor` replaces every occurrence with ``***`` (whatever the key's length) *before*
the text is cut to its shown length, so a key lying across the cut cannot leave a fragment.

What counts as an occurrence: the key as sent, and the key with any of its characters written
as a JSON escape (``\\u002f``, and ``\\/`` for ``/``) or as URL percent-encoding (``%2F``,
either case; ``+`` for a space), which covers ``json.dumps(key)``, PHP's slash escaping,
``urllib.parse.quote(key, safe="")`` and ``quote_plus``. Base64 of the key is not looked for:
nothing a server does by mistake produces it (HTTP basic auth, which does, sends no bearer key).

A text may also *end* inside the key, when a server (or a read window) cut it there: a tail of
:data:`MIN_FRAGMENT` or more characters that is a beginning of the key is masked as well.

>>> redact = Redactor("sk-abc/123456789")
>>> redact("echo: sk-abc/123456789 and sk-abc%2F123456789 and sk-abc\\\\/123456789")
'echo: *** and *** and ***'
>>> redact("x" * 10 + "sk-abc/123456789", limit=14)
'xxxxxxxxxx***'
>>> redact("cut here: sk-abc/1234")
'cut here: ***'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = [
    "MASK",
    "MIN_FRAGMENT",
    "READ_WINDOW",
    "Redactor",
    "Redactors",
    "header_secrets",
    "masked_headers",
    "secret_header",
    "secret_values",
]

MASK = "***"
#: The shortest beginning of the key masked at the end of a text (shorter ones say too little
#: about a key to be worth mangling a message that happens to end like it).
MIN_FRAGMENT = 6
#: How many bytes of an error body to read before masking: far more than is ever shown, so a key
#: that straddles the shown length is whole in the text that is masked.
READ_WINDOW = 64 * 1024
_LONGEST_CHAR_FORM = 12  # a 4-byte UTF-8 character, percent-encoded


class Redactor:
    """Masks one secret (and its JSON-escaped and URL-encoded forms) in text; then cuts it.

    Built once per process (the patterns are compiled here); calling it costs one
    ``str.replace`` when the text holds no ``%``, ``\\`` or ``+``, else one regex pass.
    ``Redactor(None)`` only cuts.
    """

    __slots__ = ("_any_form", "_prefixes", "_secret")

    def __init__(self, secret: str | None) -> None:
        self._secret = secret or ""
        self._any_form: re.Pattern[str] | None = None
        self._prefixes: tuple[str, ...] = ()
        if self._secret:
            self._any_form = re.compile("".join(_char_forms(c) for c in self._secret))
            # the tail check: every beginning of the key long enough to identify it, longest first
            self._prefixes = tuple(
                self._secret[:n] for n in range(len(self._secret) - 1, MIN_FRAGMENT - 1, -1)
            )

    def __call__(self, text: str, limit: int | None = None) -> str:
        """``text`` with the secret masked, then cut to ``limit`` characters (if given).

        With a ``limit``, only a window of the text is masked: the shown part plus room for a
        whole key in its longest form after it (grown when masks shortened it too much), so a
        long body costs no more than a short one.
        """
        if not self._secret:
            return text if limit is None else text[:limit]
        if limit is None:
            return self._mask(text)
        room = limit + _LONGEST_CHAR_FORM * len(self._secret)
        window = room
        while True:
            masked = self._mask(text[:window])
            if window >= len(text) or len(masked) >= room:
                return masked[:limit]
            window *= 2

    def _mask(self, text: str) -> str:
        secret = self._secret
        if "%" in text or "\\" in text or "+" in text:
            assert self._any_form is not None
            text = self._any_form.sub(MASK, text)
        elif secret in text:
            text = text.replace(secret, MASK)
        if text.endswith(self._prefixes):
            text = self._mask_tail(text)
        return text

    def _mask_tail(self, text: str) -> str:
        for prefix in self._prefixes:
            if text.endswith(prefix):
                return text[: -len(prefix)] + MASK
        return text  # pragma: no cover - the caller checked that one matches

    def __repr__(self) -> str:
        return f"Redactor({MASK if self._secret else None})"


def _char_forms(char: str) -> str:
    """A regex matching ``char`` as itself, as a JSON escape or URL-encoded."""
    forms = []
    code = ord(char)
    if code < 0x10000:
        forms.append(r"\\u" + _either_case(f"{code:04x}"))
    if char == "/":
        forms.append(r"\\/")
    elif char in '"\\':
        forms.append(re.escape("\\" + char))
    elif char == " ":
        forms.append(r"\+")
    forms.append("".join("%" + _either_case(f"{byte:02x}") for byte in char.encode()))
    forms.append(re.escape(char))  # last: an escape that begins with the character wins
    return "(?:" + "|".join(forms) + ")"


def _either_case(hex_digits: str) -> str:
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in hex_digits)


#: Parts of a variable's name (split at ``_``) that say it holds a secret: ``VLLM_API_KEY``,
#: ``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD`` (not ``TOKENIZERS_PARALLELISM``).
SECRET_NAME_PARTS = frozenset(
    {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS"}
)
#: Values shorter than this are never masked (``true``, ``1``: masking them would garble
#: every line and hide nothing).
MIN_SECRET_LENGTH = 8


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """The values of ``environ``'s variables whose names say they hold a secret (a part of the
    name, split at ``_``, in :data:`SECRET_NAME_PARTS`), at least :data:`MIN_SECRET_LENGTH`
    characters long.

    >>> secret_values({"HF_TOKEN": "hf_abcdefgh", "TOKENIZERS_PARALLELISM": "false1234"})
    ['hf_abcdefgh']
    """
    return [
        value
        for name, value in environ.items()
        if len(value) >= MIN_SECRET_LENGTH
        and not SECRET_NAME_PARTS.isdisjoint(name.upper().split("_"))
    ]


#: Parts of a header's lower-cased name that say its value is a credential (``X-Api-Key``,
#: ``X-Auth-Token``, ``Proxy-Authorization``, ``Cookie``, ``X-Session-Secret``): a literal value
#: of such a header is written as ``***`` in the run's files and masked in its logs.
SECRET_HEADER_PARTS = (
    "auth",
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "credential",
    "cookie",
    "session",
    "signature",
)


def secret_header(name: str) -> bool:
    """Whether header ``name``'s value is a credential (see :data:`SECRET_HEADER_PARTS`).

    >>> [secret_header(n) for n in ("Authorization", "X-Api-Key", "X-Tenant", "Cookie")]
    [True, True, False, True]
    """
    lowered = name.lower()
    return any(part in lowered for part in SECRET_HEADER_PARTS)


def masked_headers(headers: Mapping[str, object]) -> dict[str, object]:
    """``headers`` as the run's files show them: a credential-like one's value
    (:func:`secret_header`) as :data:`MASK`, unless it reads the environment (``${NAME}``,
    shown as written: the name says where the value comes from, not what it is).

    >>> masked_headers({"X-Api-Key": "sk-1", "X-Tenant": "acme", "X-Token": "${TOKEN}"})
    {'X-Api-Key': '***', 'X-Tenant': 'acme', 'X-Token': '${TOKEN}'}
    """
    return {
        name: MASK
        if secret_header(str(name)) and not (isinstance(value, str) and "${" in value)
        else value
        for name, value in headers.items()
    }


def header_secrets(api_key: str | None, headers: Mapping[str, str] | None) -> list[str]:
    """``api_key`` and the values of the credential-like ``headers`` (resolved), for
    :class:`Redactors`: what a request to the server carries that an answer may echo."""
    secrets = [api_key] if api_key else []
    for name, value in (headers or {}).items():
        if secret_header(name) and value:
            # ("Basic dXNlcjpwYXNz": the credential alone too, when long enough to say it)
            secrets += [value, *(p for p in value.split()[1:2] if len(p) >= MIN_SECRET_LENGTH)]
    return secrets


class Redactors:
    """Masks several secrets (each as :class:`Redactor` does), then cuts: a server's output
    may quote any variable of its environment, not only the client's key.

    >>> Redactors(["sk-abc123456", None, "hf_zyx987654"])("key sk-abc123456, token hf_zyx987654")
    'key ***, token ***'
    """

    __slots__ = ("_each",)

    def __init__(self, secrets: Iterable[str | None]) -> None:
        # longest first: a secret that contains another is masked whole
        unique = sorted({secret for secret in secrets if secret}, key=len, reverse=True)
        self._each = tuple(Redactor(secret) for secret in unique)

    def __call__(self, text: str, limit: int | None = None) -> str:
        if len(self._each) == 1:  # (one secret, a client's key alone: masked in a window)
            return self._each[0](text, limit)
        for redact in self._each:
            text = redact(text)
        return text if limit is None else text[:limit]

    def __repr__(self) -> str:
        return f"Redactors({len(self._each)} secrets)"
