"""Schema-driven fuzzing of the REST API: schemathesis generates requests for every operation in
the OpenAPI schema that drf-spectacular serves at /api/v1/schema/ and sends them straight to the
WSGI application, once as a team member (token auth) and once anonymously.

- Member: no response may be a 5xx, and responses must conform to the schema (status codes
  that the schema documents are checked against their body schema and content type).
- Anonymous: no 5xx, and every operation answers 401/403 whatever the input.

Database: every generated test item (one per operation and caller) gets the function-scoped
`db` fixture, so pytest-django wraps it in a transaction that is rolled back at the end; inside
it each generated request runs in its own savepoint that is rolled back too, so every example
sees the same seeded state and nothing leaks into other test modules (hence the suppressed
`function_scoped_fixture` health check: the fixture is deliberately shared by all examples and
reset by the savepoint, not per example).

Reproducible: derandomized, no example database; each operation runs a bounded number of
examples (MEMBER_EXAMPLES / ANONYMOUS_EXAMPLES) plus schemathesis' deterministic coverage cases.
"""

from datetime import datetime, timedelta

import pytest
import schemathesis
from django.conf import settings as django_settings
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from django.urls import Resolver404, resolve
from django.utils import timezone
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from apps.fleet.models import Gpu, GpuModel, Node
from apps.reservations import services as reservation_services
from apps.reservations.availability import floor_to_grid
from apps.teams.choices import TeamRole
from apps.teams.models import Quota
from portal.wsgi import application
from tests.factories import MembershipFactory, TeamFactory, UserFactory, make_node_with_gpus

pytestmark = pytest.mark.slow

SCHEMA_PATH = "/api/v1/schema/"
MEMBER_EXAMPLES = 25
ANONYMOUS_EXAMPLES = 10

schema = schemathesis.openapi.from_wsgi(SCHEMA_PATH, application)

_FUZZ_SETTINGS = dict(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)

MEMBER_CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture
def direct_wsgi():
    """Call the raw WSGI handler inside the test transaction, as Django's test client does.

    Django connects `close_old_connections` to request_started/finished; inside the test
    transaction (autocommit off) it would close the connection mid-test. The test client
    disconnects it for the same reason."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def seeded(db, direct_wsgi):
    """A small fleet, three teams, quotas and bookings so requests reach real code paths.

    alice is a plain member of `vision` and team admin of `speech`; she is not in `nlp`
    (its objects must answer 404 to her)."""
    vision, nlp, speech = (TeamFactory(slug=s) for s in ("vision", "nlp", "speech"))
    alice = MembershipFactory(team=vision, user=UserFactory(username="alice")).user
    MembershipFactory(team=speech, user=alice, role=TeamRole.TEAM_ADMIN)
    MembershipFactory(team=vision, user=UserFactory(username="bob"))
    MembershipFactory(team=speech, user=UserFactory(username="sam"))
    olga = MembershipFactory(team=nlp, user=UserFactory(username="olga")).user
    UserFactory(username="newbie")  # in no team: something to add

    nodes = [
        make_node_with_gpus("h100-a", 8),
        make_node_with_gpus("h100-b", 8),
        make_node_with_gpus("l40s-a", 4, model_name="L40S-48GB"),
    ]
    h100 = GpuModel.objects.get(name="H100-SXM-80GB")
    quotas = [
        Quota.objects.create(team=vision, gpu_model=h100, guaranteed=4, limit=12),
        Quota.objects.create(team=vision, gpu_model=None, guaranteed=0, limit=16),
        Quota.objects.create(team=speech, gpu_model=h100, guaranteed=2, limit=8),
        Quota.objects.create(team=nlp, gpu_model=h100, guaranteed=8, limit=16),
    ]
    start = _tomorrow()
    reservations = [
        reservation_services.reservation_create(
            team=team, user=user, gpu_model=h100, count=2, start=start, end=start + timedelta(hours=2)
        )
        for team, user in ((vision, alice), (speech, alice), (nlp, olga))
    ]
    return {
        "token": Token.objects.create(user=alice).key,
        "teams": ["vision", "speech", "nlp"],
        "usernames": ["alice", "bob", "sam", "olga", "newbie"],
        "gpu_models": ["H100-SXM-80GB", "L40S-48GB"],
        "hostnames": [n.hostname for n in nodes],
        "ids": {
            "nodes": [n.pk for n in Node.objects.order_by("pk")],
            "gpus": list(Gpu.objects.order_by("pk").values_list("pk", flat=True)[:6]),
            "quotas": [q.pk for q in quotas],
            "reservations": [r.pk for r in reservations],
        },
        "start": start,
    }


def _tomorrow() -> datetime:
    slot = timedelta(minutes=django_settings.RESERVATION_SLOT_MINUTES)
    return floor_to_grid(timezone.now() + timedelta(days=1), slot)


# --- steering generated values at seeded objects --------------------------------------------
#
# Random ids and slugs almost never name a seeded object, and random team / GPU model names
# never pass validation, so most requests would stop at 404 / 400. A deterministic function of
# the generated value swaps some of them for seeded ones: hypothesis still controls (and
# shrinks) the choice, and the rest keep their fuzzed values.

QUERY_TARGETS = {
    "team": "teams",
    "team__slug": "teams",
    "gpu_model": "gpu_models",
    "gpu_model__name": "gpu_models",
    "model": "gpu_models",
    "node": "hostnames",
    "hostname": "hostnames",
}
BODY_TARGETS = {"team": "teams", "gpu_model": "gpu_models", "username": "usernames"}
TIME_FIELDS = ("start", "end", "after", "starts_after", "starts_before", "ends_after")


def _pick(value, choices):
    """A seeded choice for three of four generated values of the right type, else None."""
    if isinstance(value, bool) or not choices:
        return None
    if isinstance(value, int):
        key = abs(value)
    elif isinstance(value, str):
        key = len(value)
    else:
        return None
    if key % 4 == 3:
        return None
    return choices[key % len(choices)]


def _steer_time(value, base: datetime, hours: int):
    if isinstance(value, str) and len(value) % 2 == 0:
        return (base + timedelta(hours=hours)).isoformat()
    return value


def _steer(case, seeded) -> None:
    collection = case.operation.path.split("/")[3]
    for name, value in list((case.path_parameters or {}).items()):
        choices = seeded["teams"] if name == "slug" else seeded["ids"].get(collection, [])
        picked = _pick(value, choices)
        if picked is not None:
            case.path_parameters[name] = picked
    if isinstance(case.query, dict):
        for name, value in list(case.query.items()):
            if name in QUERY_TARGETS:
                picked = _pick(value, seeded[QUERY_TARGETS[name]])
                if picked is not None:
                    case.query[name] = picked
            elif name in TIME_FIELDS:
                case.query[name] = _steer_time(value, seeded["start"], 0)
    if isinstance(case.body, dict):
        for name, value in list(case.body.items()):
            if name in BODY_TARGETS:
                picked = _pick(value, seeded[BODY_TARGETS[name]])
                if picked is not None:
                    case.body[name] = picked
            elif name in ("start", "end"):
                case.body[name] = _steer_time(value, seeded["start"], 4 if name == "end" else 3)


def _call_in_savepoint(case, **kwargs):
    """Send the request in a savepoint that is rolled back: every example sees the seed."""
    with transaction.atomic():
        response = case.call(**kwargs)
        transaction.set_rollback(True)
    return response


def _reaches_api_view(path: str) -> bool:
    try:
        resolve(path)
    except Resolver404:
        return False
    return True


# --- tests ----------------------------------------------------------------------------------


@schema.parametrize()
@settings(max_examples=MEMBER_EXAMPLES, **_FUZZ_SETTINGS)
def test_member_gets_no_server_error_and_schema_conforming_answers(case, seeded):
    _steer(case, seeded)
    headers = {"Authorization": f"Token {seeded['token']}"}
    response = _call_in_savepoint(case, headers=headers)
    case.validate_response(response, checks=MEMBER_CHECKS, headers=headers)
    if case.operation.path.rsplit("/", 2)[-2] in ("drain", "undrain", "retire"):
        if _reaches_api_view(case.formatted_path):
            assert response.status_code == 403, (response.status_code, response.text[:500])


@schema.parametrize()
@settings(max_examples=ANONYMOUS_EXAMPLES, **_FUZZ_SETTINGS)
def test_anonymous_is_refused_everywhere(case, seeded):
    _steer(case, seeded)
    response = _call_in_savepoint(case)
    case.validate_response(response, checks=[not_a_server_error])
    if not _reaches_api_view(case.formatted_path):
        return  # never routed to an operation (e.g. a path parameter with a "/")
    assert response.status_code in (401, 403), (
        f"{case.operation.label} answered an anonymous caller {response.status_code}: "
        f"{response.text[:500]}"
    )
