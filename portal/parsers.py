"""The API's parsers: JSON with bounded nesting; only text PostgreSQL can store in JSON or form
fields.

Python's json module recurses once per nesting level: 50,000 nested arrays raise RecursionError
(a 500), and a few hundred levels still reach serializers and JSON fields that recurse again.
PostgreSQL cannot store "\\u0000" in text or jsonb, and a lone surrogate ("\\ud800", which JSON
may spell) cannot even be encoded for it (portal.pg_text). All are refused here as a 400.
"""

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser

from portal.pg_text import data_problem, text_problem


def json_problem(data, *, max_depth: int) -> str:
    """Why parsed JSON `data` is refused, or "" when it is fine."""
    return data_problem(data, max_depth=max_depth)


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
        for text in (name, *values):
            problem = text_problem(text) if isinstance(text, str) else ""
            if problem:
                return problem
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
