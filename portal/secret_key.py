"""What makes a production secret key acceptable.

Imported by the settings, so nothing here may import Django models or settings.
"""

import math
import re

SECRET_KEY_MIN_LENGTH = 32
SECRET_KEY_MIN_DISTINCT = 10
# Estimated strength a key needs. secrets.token_hex(16), the shortest key a generator gives,
# is estimated at 91 bits or more; sequences, repeats, keyboard walks and typed words are far
# below 80 bits.
SECRET_KEY_MIN_BITS = 80
# A key mostly made of words was typed, not generated. Words of 4+ letters cover at most about a
# fifth of a generated key (a third in keys of lowercase letters only); typed ones are half words.
SECRET_KEY_MAX_WORD_SHARE = 0.45
# zxcvbn judges at most this many characters at a time (its own limit).
_CHUNK = 72
_HEX = re.compile(r"^[0-9a-fA-F]+$")

# Values shipped in this repository's own files and Django's development prefix: whoever
# copies them into production has not set a key.
KNOWN_PLACEHOLDERS = frozenset(
    {
        "build-only-collectstatic-placeholder-not-a-secret",  # the Dockerfile's, before it drew one
        "change-me",  # .env.example
        "dev-only-insecure-secret-key-change-me",  # settings' development default
    }
)
PLACEHOLDER_PREFIXES = ("django-insecure-",)


def secret_key_problem(key: str, *, dev_key: str) -> str:
    """Why `key` is not fit for production, or "" when it is.

    Length and distinct characters refuse the obvious; zxcvbn (Dropbox's strength estimator)
    then estimates how many guesses the key takes, seeing through sequences
    ("0123456789abcdef" twice), repeats, keyboard walks and dictionary words, so a key has to
    come from a generator.
    """
    if key in (dev_key, *KNOWN_PLACEHOLDERS) or key.startswith(PLACEHOLDER_PREFIXES):
        return "it is the development key or a placeholder from the project's own files."
    if len(key) < SECRET_KEY_MIN_LENGTH:
        return f"it has {len(key)} characters, at least {SECRET_KEY_MIN_LENGTH} are needed."
    distinct = len(set(key))
    if distinct < SECRET_KEY_MIN_DISTINCT:
        return (
            f"it has only {distinct} distinct characters, at least "
            f"{SECRET_KEY_MIN_DISTINCT} are needed (it is not random)."
        )
    bits, word_share = _strength(key)
    if bits < SECRET_KEY_MIN_BITS:
        return (
            f"it is guessable: an estimated {bits:.0f} bits of entropy, at least "
            f"{SECRET_KEY_MIN_BITS} are needed (it holds sequences, repeats or common words)."
        )
    if word_share > SECRET_KEY_MAX_WORD_SHARE:
        return (
            f"it is made of words ({word_share:.0%} of it): a key has to be generated, not typed."
        )
    return ""


def _strength(key: str) -> tuple[float, float]:
    """(estimated bits, share of the key in dictionary words of 4+ letters).

    Chunks are estimated on their own and their bits add up, as for independent parts. Runs of
    hex digits that happen to spell a word ("cafe", "dead") do not count as words: hex keys
    are full of them.
    """
    from zxcvbn import zxcvbn  # imported only when DEBUG is off: loading its lists takes time

    bits = 0.0
    word_chars = 0
    for at in range(0, len(key), _CHUNK):
        result = zxcvbn(key[at : at + _CHUNK], max_length=_CHUNK)
        bits += float(result["guesses_log10"]) * math.log2(10)
        word_chars += sum(
            len(match["token"])
            for match in result["sequence"]
            if match["pattern"] == "dictionary"
            and len(match["token"]) >= 4
            and not _HEX.match(match["token"])
        )
    return bits, word_chars / len(key)
