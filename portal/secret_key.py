"""What makes a production secret key acceptable; the key of a development install; the
commands that need none.

Imported by the settings, so nothing here may import Django models or settings.
"""

import math
import os
import re
import secrets
import tempfile
from pathlib import Path

# manage.py commands that serve no web traffic and sign nothing that outlives them: production
# settings let them run without DJANGO_SECRET_KEY and DJANGO_ALLOWED_HOSTS.
OFFLINE_COMMANDS = frozenset({"replay_trace"})

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


def development_secret_key(folder: Path) -> str:
    """The secret key of a development install (the demo): made once into `folder/secret_key`
    (readable by its owner only) and read from there after, so restarting keeps everyone
    signed in. Processes starting together agree: the first file linked into place wins."""
    path = Path(folder) / "secret_key"
    if not path.exists():
        descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=".secret_key.")
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_urlsafe(50) + "\n")
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(temporary)
    return path.read_text().strip()


def offline_command(argv: list[str]) -> bool:
    """Whether this process is `manage.py` running one of OFFLINE_COMMANDS (read from the
    command line, not the environment, so no setting can switch a web server to it)."""
    return len(argv) > 1 and Path(argv[0]).name == "manage.py" and argv[1] in OFFLINE_COMMANDS
