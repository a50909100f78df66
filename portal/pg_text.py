"""Text PostgreSQL can store: valid UTF-8 without NUL characters.

JSON lets a sender write "\\u0000" and lone UTF-16 surrogates ("\\ud800"); Python decodes both
into a `str`, but PostgreSQL text refuses NUL and psycopg cannot encode a surrogate to UTF-8.
Either one reaching a query is a 500 in a web request and a failed transaction in a worker.
Text from outside (request bodies and parameters, agent messages) is checked here before use;
text that must be kept whatever it holds (a dead letter) is made storable by escaping.
"""

NUL = "\x00"
NUL_MESSAGE = "Null characters are not allowed."
SURROGATE_MESSAGE = "Unpaired surrogate characters are not allowed."


def text_problem(text: str, *, place: str = "") -> str:
    """Why `text` cannot be stored as it is, or "" when it can; `place` says where it was
    ("in cookies")."""
    if NUL in text:
        problem = NUL_MESSAGE
    elif text.isascii():
        return ""
    else:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            problem = SURROGATE_MESSAGE
        else:
            return ""
    return said_where(problem, place) if place else problem


def said_where(problem: str, place: str) -> str:
    """`problem` with where it was found: "Null characters are not allowed in cookies."."""
    return f"{problem.removesuffix('.')} {place}."


def data_problem(data, *, max_depth: int | None = None) -> str:
    """Why decoded JSON-like `data` (its strings and keys, at any depth) cannot be stored, or
    "" when it can. Iterative: a deep document cannot overflow the stack here."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            problem = text_problem(value)
            if problem:
                return problem
        elif isinstance(value, dict | list | tuple):
            if max_depth is not None and depth > max_depth:
                return f"JSON nested deeper than {max_depth} levels is not accepted."
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str):
                    stack.append((key, depth))
                stack.append((item, depth + 1))
    return ""


def storable(text: str, limit: int | None = None) -> str:
    """`text` as PostgreSQL can hold it: NUL and lone surrogates written as backslash escapes
    (`\\x00`, `\\ud800`), cut to `limit` characters with an ellipsis."""
    text = text.replace(NUL, "\\x00")
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text
