"""Schema-driven fuzzing of the REST API.

schemathesis reads the OpenAPI schema drf-spectacular serves at /api/v1/schema/ and sends
generated requests for every operation in it straight to the WSGI application, as two callers:

- a team member (token auth): no 5xx; a documented status must match its response schema and
  content type; anything else must be a known refusal (400/403/404/405/406/409/415/429) in the
  API's one error envelope {"code", "message", "detail"}; drain/undrain/retire answer 403.
- an anonymous client: no 5xx, and every operation answers 401/403 whatever the input.

Database: each generated test item (one per operation and caller) uses the function-scoped
`db` fixture, so pytest-django runs it in a transaction that is rolled back afterwards; inside
it every request runs in a savepoint that is rolled back too, so each example sees the same
seed and nothing leaks into other tests. That is why hypothesis' `function_scoped_fixture`
health check is suppressed: sharing the fixture across examples is intended, and the savepoint
resets what the examples change.

Bounded and reproducible: derandomized with no example database; the member runs
MEMBER_EXAMPLES fuzzed examples per operation plus schemathesis' deterministic coverage cases
(boundary and invalid values), the anonymous client ANONYMOUS_EXAMPLES fuzzed examples (it is
refused before any input is read, so coverage cases would add time and nothing else).
"""

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote, urlsplit

import pytest
import schemathesis
from django.conf import settings as django_settings
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from django.test import override_settings
from django.urls import Resolver404, resolve
from django.utils import timezone
from drf_spectacular.generators import EndpointEnumerator
from hypothesis import HealthCheck, Phase, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
)

from apps.audit.models import AuditEvent
from apps.fleet.models import Gpu, GpuModel, Node
from apps.reservations import services as reservation_services
from apps.reservations.models import Reservation
from apps.teams.choices import TeamRole
from apps.teams.models import Membership, Quota, Team, User
from portal.wsgi import application
from tests.factories import MembershipFactory, TeamFactory, UserFactory, make_node_with_gpus

pytestmark = pytest.mark.slow

SCHEMA_PATH = "/api/v1/schema/"
MEMBER_EXAMPLES = 25
ANONYMOUS_EXAMPLES = 10


def _load_schema(*, coverage_phase: bool):
    config = SchemathesisConfig.from_dict({"phases": {"coverage": {"enabled": coverage_phase}}})
    # The schema needs a login by default; opening it here (before any database exists) is
    # the documented API_DOCS_PUBLIC switch, read per request.
    with override_settings(API_DOCS_PUBLIC=True):
        return schemathesis.openapi.from_wsgi(SCHEMA_PATH, application, config=config)


member_schema = _load_schema(coverage_phase=True)
anonymous_schema = _load_schema(coverage_phase=False)

FUZZ_SETTINGS = {
    "derandomize": True,
    "database": None,
    "deadline": None,
    "print_blob": False,
    "suppress_health_check": [
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
}

# status_code_conformance is replaced by _check_status_and_error_body (see there).
MEMBER_CHECKS = [
    not_a_server_error,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
ADMIN_ONLY_ACTIONS = ("drain", "undrain", "retire")
LEAK_WATCHED = (User, Team, Membership, Quota, Node, Gpu, Reservation, Token, AuditEvent)


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def nothing_leaks(django_db_setup, django_db_blocker):
    """Proof that the seed and whatever the fuzzer wrote are gone once the module is done."""

    def counts():
        with django_db_blocker.unblock():
            return {model.__name__: model.objects.count() for model in LEAK_WATCHED}

    before = counts()
    yield
    assert counts() == before


@pytest.fixture
def direct_wsgi():
    """Let the raw WSGI handler run inside the test transaction, as Django's test client does.

    Django connects `close_old_connections` to request_started/finished; with the test
    transaction open (autocommit off) it would close the connection in the middle of the test
    and every later query would fail. The test client disconnects it for the same reason."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def seeded(db, direct_wsgi):
    """A small fleet, three teams, quotas and bookings, so requests reach real code paths.

    alice (the member) is a plain member of `vision` and team admin of `speech`; she is not in
    `nlp`, whose objects must not exist for her (404)."""
    vision, nlp, speech = (TeamFactory(slug=slug) for slug in ("vision", "nlp", "speech"))
    alice = MembershipFactory(team=vision, user=UserFactory(username="alice")).user
    MembershipFactory(team=speech, user=alice, role=TeamRole.TEAM_ADMIN)
    MembershipFactory(team=vision, user=UserFactory(username="bob"))
    MembershipFactory(team=speech, user=UserFactory(username="sam"))
    olga = MembershipFactory(team=nlp, user=UserFactory(username="olga")).user
    UserFactory(username="newbie")  # in no team: someone to add

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
    start = _tomorrow_on_grid()
    reservations = [
        reservation_services.reservation_create(
            team=team,
            user=user,
            gpu_model=h100,
            count=2,
            start=start,
            end=start + timedelta(hours=2),
        )
        for team, user in ((vision, alice), (speech, alice), (nlp, olga))
    ]
    return {
        "token": Token.objects.create(user=alice).key,
        "teams": ["vision", "speech", "nlp"],
        "usernames": ["alice", "bob", "sam", "olga", "newbie"],
        "gpu_models": ["H100-SXM-80GB", "L40S-48GB"],
        "hostnames": [node.hostname for node in nodes],
        "ids": {
            "nodes": [node.pk for node in nodes],
            "gpus": list(Gpu.objects.order_by("pk").values_list("pk", flat=True)[:6]),
            "quotas": [quota.pk for quota in quotas],
            "reservations": [reservation.pk for reservation in reservations],
        },
        "start": start,
    }


def _tomorrow_on_grid() -> datetime:
    """About a day ahead, on the booking grid (slots are anchored at the Unix epoch)."""
    slot = django_settings.RESERVATION_SLOT_MINUTES * 60
    moment = int((timezone.now() + timedelta(days=1)).timestamp())
    return datetime.fromtimestamp(moment // slot * slot, tz=UTC)


# --- steering generated values at seeded objects --------------------------------------------
#
# Random ids and slugs almost never name a seeded object, and random team or GPU model names
# never pass validation, so most requests would stop at 404 or 400. A deterministic function of
# each generated value swaps most of them for seeded ones: hypothesis still drives (and
# shrinks) the choice, and the rest keep their fuzzed values.

QUERY_TARGETS = {
    "team": "teams",
    "team__slug": "teams",
    "gpu_model": "gpu_models",
    "gpu_model__name": "gpu_models",
    "model": "gpu_models",
    "node": "hostnames",
    "hostname": "hostnames",
    "username": "usernames",
}
BODY_TARGETS = {"team": "teams", "gpu_model": "gpu_models", "username": "usernames"}
QUERY_TIMES = ("start", "end", "after", "starts_after", "starts_before", "ends_after")
BODY_TIMES = {"start": 3, "end": 5}  # hours after the seeded bookings' start


def _pick(value, choices, kind: type):
    """A seeded choice for three in four generated values of `kind` (ints: by value, strings:
    by length), else None: keep it. Values of another type (negative cases) are kept."""
    if type(value) is not kind or not choices:
        return None
    key = abs(value) if kind is int else len(value)
    if key % 4 == 3:
        return None
    return choices[key % len(choices)]


def _steer_time(value, base: datetime, hours: int):
    if isinstance(value, str) and len(value) % 2 == 0:
        return (base + timedelta(hours=hours)).isoformat()
    return value


def _steer(case, seeded) -> None:
    collection = case.operation.path.split("/")[3]  # /api/v1/<collection>/...
    for name, value in list((case.path_parameters or {}).items()):
        if name == "slug":
            picked = _pick(value, seeded["teams"], str)
        else:
            picked = _pick(value, seeded["ids"].get(collection, []), int)
        if picked is not None:
            case.path_parameters[name] = picked
    if isinstance(case.query, dict):
        for name, value in list(case.query.items()):
            if name in QUERY_TARGETS:
                picked = _pick(value, seeded[QUERY_TARGETS[name]], str)
                if picked is not None:
                    case.query[name] = picked
            elif name in QUERY_TIMES:
                case.query[name] = _steer_time(value, seeded["start"], 0)
    if isinstance(case.body, dict):
        for name, value in list(case.body.items()):
            if name in BODY_TARGETS:
                picked = _pick(value, seeded[BODY_TARGETS[name]], str)
                if picked is not None:
                    case.body[name] = picked
            elif name in BODY_TIMES:
                case.body[name] = _steer_time(value, seeded["start"], BODY_TIMES[name])


# --- helpers --------------------------------------------------------------------------------


def _call_in_savepoint(case, **kwargs):
    """Send the request in a savepoint that is rolled back: every example sees the seed."""
    with transaction.atomic():
        response = case.call(**kwargs)
        transaction.set_rollback(True)
    return response


def _reaches_operation(response) -> bool:
    """Whether the request as sent was routed to the documented operation's view.

    Not when no URL pattern matches (e.g. a path parameter with "/"), nor for the router's
    format-suffix twin of a route (`/gpus/0.5/` is `/gpus/0/` with format "5", which DRF
    answers 404 during content negotiation, before authentication)."""
    try:
        match = resolve(unquote(urlsplit(response.request.url).path))
    except Resolver404:
        return False
    return "format" not in match.kwargs


# Statuses an operation may answer without documenting them: drf-spectacular documents only
# the success status, while every operation can refuse (DESIGN.md, rule 6). 401 is not among
# them: the member's token is valid, so a 401 would be a bug.
UNDOCUMENTED_REFUSALS = {400, 403, 404, 405, 406, 409, 415, 429}
ERROR_ENVELOPE = {"code", "message", "detail"}


def _check_status_and_error_body(case, response) -> None:
    """In place of schemathesis' status_code_conformance, which fails on every 4xx since the
    schema documents none: the status is documented or a known refusal, and a refusal by the
    API carries the one error envelope {"code", "message", "detail"}."""
    status = response.status_code
    if str(status) in case.operation.definition.raw["responses"]:
        return
    assert status in UNDOCUMENTED_REFUSALS, (
        f"{case.operation.label} answered {status}: {response.text[:500]}"
    )
    if _reaches_operation(response):
        body = response.json()
        assert isinstance(body, dict) and set(body) == ERROR_ENVELOPE, (
            f"{case.operation.label} answered {status} without the error envelope: "
            f"{response.text[:500]}"
        )
        assert isinstance(body["code"], str) and body["code"], body


def _operations(schema) -> set[tuple[str, str]]:
    return {(op.method.upper(), op.path) for op in (r.ok() for r in schema.get_all_operations())}


# --- tests ----------------------------------------------------------------------------------


def test_schema_documents_every_api_endpoint():
    """The fuzz tests cover what the schema lists; this makes sure it lists every endpoint
    (a view with `schema = None` or `extend_schema(exclude=True)` would escape them)."""
    served = {
        (method.upper(), path.replace("{pk}", "{id}"))
        for path, _regex, method, _view in EndpointEnumerator().get_api_endpoints()
        if path.startswith("/api/v1/") and not path.startswith(("/api/v1/schema/", "/api/v1/docs/"))
    }
    documented = _operations(member_schema)
    assert served - documented == set()
    assert documented == _operations(anonymous_schema)
    assert len(documented) >= 28


@member_schema.parametrize()
@settings(max_examples=MEMBER_EXAMPLES, **FUZZ_SETTINGS)
def test_member_gets_no_server_error_and_schema_conforming_answers(case, seeded):
    _steer(case, seeded)
    headers = {"Authorization": f"Token {seeded['token']}"}
    response = _call_in_savepoint(case, headers=headers)
    case.validate_response(response, checks=MEMBER_CHECKS, headers=headers)
    _check_status_and_error_body(case, response)
    action = case.operation.path.rstrip("/").rsplit("/", 1)[-1]
    if action in ADMIN_ONLY_ACTIONS and _reaches_operation(response):
        assert response.status_code == 403, (
            f"{case.operation.label} is for platform admins; a member got "
            f"{response.status_code}: {response.text[:500]}"
        )


def _query_has_nul(query) -> bool:
    """Whether a name or any value (a repeated parameter is a list) holds a NUL byte."""
    for name, value in (query or {}).items():
        values = value if isinstance(value, list | tuple) else [value]
        if any("\x00" in str(part) for part in [name, *values]):
            return True
    return False


@anonymous_schema.parametrize()
@settings(max_examples=ANONYMOUS_EXAMPLES, **FUZZ_SETTINGS)
def test_anonymous_is_refused_everywhere(case, seeded):
    _steer(case, seeded)
    response = _call_in_savepoint(case)
    case.validate_response(response, checks=[not_a_server_error])
    # A NUL byte in the query is refused before anything else (portal.request_limits), for
    # every caller alike: 400, which tells an anonymous caller nothing about the data.
    allowed = (400, 401, 403) if _query_has_nul(case.query) else (401, 403)
    if _reaches_operation(response):
        assert response.status_code in allowed, (
            f"{case.operation.label} answered an anonymous caller {response.status_code}: "
            f"{response.text[:500]}"
        )
        assert set(response.json()) == ERROR_ENVELOPE, response.text[:500]


# --- inputs no generator sends: NUL bytes, deep nesting ---------------------------------------
#
# PostgreSQL text cannot hold NUL (a filter on it raises DataError) and Python's json recurses
# per nesting level (RecursionError): both were 500s. Every operation gets them here, through
# the same generated cases, and must refuse them as the client's mistake.

NUL = "\x00"
NUL_QUERY = {"team": f"vision{NUL}", "gpu_model": f"H100{NUL}-SXM-80GB"}
DEEP_JSON = ("[" * 50_000 + "]" * 50_000).encode()
BODY_METHODS = ("POST", "PUT", "PATCH")


def _with_nul(value):
    return f"{value}{NUL}x" if isinstance(value, str) else value


def _assert_refused_in_envelope(case, response, statuses) -> None:
    assert response.status_code in statuses, (
        f"{case.operation.label} answered {response.status_code}: {response.text[:500]}"
    )
    if _reaches_operation(response) or response.status_code == 400:
        body = response.json()
        assert isinstance(body, dict) and set(body) == ERROR_ENVELOPE, response.text[:500]


@member_schema.parametrize()
@settings(max_examples=3, phases=[Phase.generate], **FUZZ_SETTINGS)
def test_nul_bytes_in_query_parameters_are_400_everywhere(case, seeded):
    _steer(case, seeded)
    query = {name: _with_nul(value) for name, value in (case.query or {}).items()}
    case.query = {**query, **NUL_QUERY}
    headers = {"Authorization": f"Token {seeded['token']}"}
    response = _call_in_savepoint(case, headers=headers)
    _assert_refused_in_envelope(case, response, {400})
    assert "Null characters" in response.json()["message"]


@member_schema.parametrize()
@settings(max_examples=3, phases=[Phase.generate], **FUZZ_SETTINGS)
def test_nul_bytes_in_json_bodies_get_no_server_error(case, seeded):
    if case.method.upper() not in BODY_METHODS or not isinstance(case.body, dict):
        return
    _steer(case, seeded)
    case.body = {name: _with_nul(value) for name, value in case.body.items()}
    headers = {"Authorization": f"Token {seeded['token']}"}
    response = _call_in_savepoint(case, headers=headers)
    case.validate_response(response, checks=[not_a_server_error], headers=headers)
    if response.status_code >= 400:
        _assert_refused_in_envelope(case, response, UNDOCUMENTED_REFUSALS)


def _without_nul(value):
    """``value`` with no NUL character at any depth: the generator draws them, and they are
    refused before any surrogate, with their own message (see the test above)."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    if isinstance(value, dict):
        return {_without_nul(key): _without_nul(item) for key, item in value.items()}
    return value


def _with_surrogate(value):
    value = _without_nul(value)
    return f"{value}\ud800" if isinstance(value, str) else value


@member_schema.parametrize()
@settings(max_examples=3, phases=[Phase.generate], **FUZZ_SETTINGS)
def test_lone_surrogates_in_json_bodies_get_no_server_error(case, seeded):
    """JSON may spell a lone surrogate ("\\ud800"), which PostgreSQL cannot take: wherever the
    body is read it is refused as the client's mistake (portal.parsers)."""
    if case.method.upper() not in BODY_METHODS or not isinstance(case.body, dict):
        return
    _steer(case, seeded)
    body = {_with_surrogate(name): _with_surrogate(value) for name, value in case.body.items()}
    headers = {"Authorization": f"Token {seeded['token']}", "Content-Type": "application/json"}
    response = _call_in_savepoint(case, headers=headers, data=json.dumps(body).encode())
    case.validate_response(response, checks=[not_a_server_error], headers=headers)
    if response.status_code >= 400:
        _assert_refused_in_envelope(case, response, UNDOCUMENTED_REFUSALS)
    if response.status_code == 400 and body:
        assert "surrogate" in response.json()["message"], response.text[:500]


@member_schema.parametrize()
@settings(max_examples=1, phases=[Phase.generate], **FUZZ_SETTINGS)
def test_deeply_nested_json_bodies_get_no_server_error(case, seeded):
    if case.method.upper() not in BODY_METHODS:
        return
    _steer(case, seeded)
    headers = {"Authorization": f"Token {seeded['token']}", "Content-Type": "application/json"}
    response = _call_in_savepoint(case, headers=headers, data=DEEP_JSON)
    case.validate_response(response, checks=[not_a_server_error], headers=headers)
    # Views that read no body may succeed; any refusal is in the envelope, and a view that
    # parses the body refuses the nesting itself (400 parse_error).
    if response.status_code >= 400:
        _assert_refused_in_envelope(case, response, UNDOCUMENTED_REFUSALS)
