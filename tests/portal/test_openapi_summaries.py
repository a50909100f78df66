"""Every operation of the API schema has a one-line summary (Swagger UI lists them)."""

import pytest
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db

METHODS = {"get", "post", "put", "patch", "delete"}


def _operations():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield path, method, operation


def test_every_operation_has_a_summary():
    operations = list(_operations())
    assert len(operations) > 40
    missing = [f"{m.upper()} {p}" for p, m, op in operations if not op.get("summary", "").strip()]
    assert missing == []


def test_summaries_tell_operations_apart():
    seen: dict[str, str] = {}
    for path, method, operation in _operations():
        key = f"{method.upper()} {path}"
        assert operation["summary"] not in seen, (key, seen.get(operation["summary"]))
        seen[operation["summary"]] = key


def test_viewsets_state_their_own_summaries():
    by_key = {f"{m.upper()} {p}": op["summary"] for p, m, op in _operations()}
    assert by_key["POST /api/v1/reservations/"] == "Book GPUs"
    assert by_key["POST /api/v1/reservations/{id}/cancel/"] == "Cancel a reservation"
    assert by_key["PATCH /api/v1/teams/{slug}/members/{username}/"] == "Change a member's role"
    assert by_key["POST /api/v1/jobs/"] == "Submit a job"
