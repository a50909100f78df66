"""The API's parsers: JSON with bounded nesting; no NUL characters in JSON or form fields.

Python's json module recurses once per nesting level: 50,000 nested arrays raise RecursionError
(a 500), and a few hundred levels still reach serializers and JSON fields that recurse again.
PostgreSQL cannot store "\u0000" in text or jsonb. Both are refused here as a 400.
"""

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser

NUL = "\x00"


def json_problem(data, *, max_depth: int) -> str:
    """Why parsed JSON `data` is refused, or "" when it is fine. Iterative: a deep document
    cannot overflow the stack here."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if NUL in value:
                return "Null characters are not allowed."
        elif isinstance(value, dict | list):
            if depth > max_depth:
                return f"JSON nested deeper than {max_depth} levels is not accepted."
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str) and NUL in key:
                    return "Null characters are not allowed."
                stack.append((item, depth + 1))
    return ""


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(
                f"JSON nested deeper than {settings.API_JSON_MAX_DEPTH} levels is not accepted."
            ) from None
        problem = json_problem(data, max_depth=settings.API_JSON_MAX_DEPTH)
        if problem:
            raise ParseError(problem)
        return data


def form_problem(data) -> str:
    """Why a parsed form (a QueryDict) is refused, or "" when it is fine. File contents are
    not checked: they are bytes, never stored as text."""
    for name, values in data.lists():
        if NUL in name or any(isinstance(value, str) and NUL in value for value in values):
            return "Null characters are not allowed."
    return ""


class NulFreeFormParser(FormParser):
    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        problem = form_problem(data)
        if problem:
            raise ParseError(problem)
        return data


class NulFreeMultiPartParser(MultiPartParser):
    def parse(self, stream, media_type=None, parser_context=None):
        parsed = super().parse(stream, media_type, parser_context)
        problem = form_problem(parsed.data)
        if problem:
            raise ParseError(problem)
        return parsed
