"""Input the database or the parsers cannot take is refused as the client's mistake: 400 (413
for a body over the limit) in the API's error envelope, never a 500 or an HTML page."""

import json

import pytest
from django.conf import settings
from django.test import override_settings
from rest_framework.authtoken.models import Token

from portal.parsers import json_problem

ENVELOPE = {"code", "message", "detail"}
NUL = "\x00"
FILTERED_ENDPOINTS = [
    "/api/v1/usage/",
    "/api/v1/availability/",
    "/api/v1/availability/timeline/",
    "/api/v1/dashboards/utilization/",
    "/api/v1/dashboards/idle/",
    "/api/v1/dashboards/occupancy/",
    "/api/v1/dashboards/fleet-health/",
    "/api/v1/dashboards/quota-pressure/",
]
BODY_ENDPOINTS = ["/api/v1/reservations/", "/api/v1/jobs/"]

pytestmark = pytest.mark.django_db


@pytest.fixture
def as_admin(client, platform_admin, quotas):
    """A platform admin (sees every team and the fleet page) with a token, no exceptions
    raised by the test client: every answer is inspected as a caller would see it."""
    client.raise_request_exception = False
    token = Token.objects.create(user=platform_admin).key
    client.defaults["HTTP_AUTHORIZATION"] = f"Token {token}"
    return client


def assert_envelope(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == ENVELOPE, body
    if code:
        assert body["code"] == code, body
    return body


@pytest.mark.parametrize("url", FILTERED_ENDPOINTS)
@pytest.mark.parametrize("param", ["team", "gpu_model"])
def test_nul_in_a_filter_parameter_is_400(as_admin, url, param):
    query = {"gpu_model": "H100-SXM-80GB", "count": 1, param: f"vision{NUL}"}
    body = assert_envelope(as_admin.get(url, query), 400, "invalid")
    assert body["detail"] == {param: ["Null characters are not allowed."]}


def test_nul_in_a_parameter_name_or_path_is_400(as_admin):
    assert_envelope(as_admin.get("/api/v1/usage/", {f"te{NUL}am": "vision"}), 400, "invalid")
    assert_envelope(as_admin.get("/api/v1/teams/vi%00sion/"), 400, "invalid")


@override_settings(DEBUG=False)
def test_nul_in_a_dashboard_page_filter_is_400_not_500(client, member, quotas):
    client.raise_request_exception = False
    client.force_login(member)
    for url in ("/dashboards/utilization/", "/dashboards/idle/", "/dashboards/occupancy/"):
        response = client.get(url, {"team": f"vision{NUL}"})
        assert response.status_code == 400, url
        assert b"Null characters" in response.content


@override_settings(DEBUG=False)
def test_nul_in_a_page_form_post_is_400_and_books_nothing(client, member, quotas, tomorrow_9):
    from apps.reservations.models import Reservation

    client.raise_request_exception = False
    client.force_login(member)
    response = client.post(
        "/reservations/new/",
        {"team": f"vision{NUL}", "gpu_model": "H100-SXM-80GB", "count": 1},
    )
    assert response.status_code == 400
    assert not Reservation.objects.exists()


@pytest.mark.parametrize("url", BODY_ENDPOINTS)
def test_fifty_thousand_levels_of_nesting_are_400(as_admin, url):
    deep = "[" * 50_000 + "]" * 50_000
    body = assert_envelope(
        as_admin.post(url, deep, content_type="application/json"), 400, "parse_error"
    )
    assert "nested deeper than" in body["message"]


@pytest.mark.parametrize("url", BODY_ENDPOINTS)
def test_nesting_just_past_the_limit_is_400_and_at_the_limit_is_parsed(as_admin, url):
    depth = settings.API_JSON_MAX_DEPTH  # the body object itself is the first level
    over = {"team": "vision", "extra": json.loads("[" * depth + "]" * depth)}
    assert_envelope(as_admin.post(url, over, content_type="application/json"), 400, "parse_error")
    at_limit = {"team": "vision", "extra": json.loads("[" * (depth - 1) + "]" * (depth - 1))}
    response = as_admin.post(url, at_limit, content_type="application/json")
    # Parsed, then judged on its fields (here: missing ones), not on its shape.
    assert_envelope(response, 400, "invalid")


@pytest.mark.parametrize("url", BODY_ENDPOINTS)
def test_nul_anywhere_in_a_json_body_is_400(as_admin, url):
    for payload in (
        {"team": f"vision{NUL}"},
        {"team": "vision", "argv": ["python", f"train{NUL}.py"]},
        {"team": "vision", "env": {f"KEY{NUL}": "1"}},
    ):
        body = assert_envelope(
            as_admin.post(url, payload, content_type="application/json"), 400, "parse_error"
        )
        assert body["message"] == "Null characters are not allowed."


@pytest.mark.parametrize("url", BODY_ENDPOINTS)
def test_nul_in_a_form_body_is_400(as_admin, url):
    response = as_admin.post(url, {"team": f"vision{NUL}", "gpu_model": "H100-SXM-80GB"})
    assert_envelope(response, 400, "parse_error")


@pytest.mark.parametrize("url", BODY_ENDPOINTS)
def test_a_ten_megabyte_body_is_413_in_the_envelope(as_admin, url):
    big = json.dumps({"team": "vision", "purpose": "x" * 10_000_000})
    body = assert_envelope(as_admin.post(url, big, content_type="application/json"), 413)
    assert body["code"] == "too_large"
    assert body["detail"]["limit_bytes"] == settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def test_a_body_too_large_without_a_length_header_is_413_in_the_envelope(as_admin):
    """Django checks the declared length while DRF reads the body; a lying header must not
    turn that into an HTML page either."""
    from django.core.exceptions import RequestDataTooBig

    from portal.exceptions import api_exception_handler

    response = api_exception_handler(RequestDataTooBig("too big"), {})
    assert response.status_code == 413
    assert set(response.data) == ENVELOPE and response.data["code"] == "too_large"


def test_json_problem_walks_deep_documents_without_recursing():
    deep: list = []
    cursor = deep
    for _ in range(100_000):
        cursor.append([])
        cursor = cursor[0]
    assert "nested deeper than 32" in json_problem(deep, max_depth=32)
    assert json_problem({"a": [{"b": "ok"}]}, max_depth=3) == ""
    assert json_problem({"a": [{"b": "ok"}]}, max_depth=2) != ""


# --- lone surrogates, NUL in cookies and headers, the error pages ----------------------------
#
# JSON may spell a lone UTF-16 surrogate ("\ud800"); Python decodes it, but it cannot be
# encoded for PostgreSQL (or into a UTF-8 reply), so wherever it reached a query or an echoed
# error message the answer was a 500. A NUL in the session cookie or a token did the same.

SURROGATE = "\ud800"
SURROGATE_BODIES = [
    ("post", "/api/v1/jobs/", {"team": "vision", "argv": ["python", SURROGATE]}),
    ("post", "/api/v1/jobs/", {"team": "vision", "argv": ["python"], "env": {"A": SURROGATE}}),
    ("post", "/api/v1/jobs/", {"team": "vision", "argv": ["python"], "env": {SURROGATE: "1"}}),
    ("patch", "/api/v1/teams/vision/members/alice/", {"role": SURROGATE}),
    ("post", "/api/v1/budgets/", {"team": "vision", "amount": "10", "enforcement": SURROGATE}),
    ("delete", "/api/v1/teams/vision/members/", {"username": SURROGATE}),
    ("post", "/api/v1/reservations/", {"team": "vision", "purpose": f"ablation {SURROGATE}"}),
    ("post", "/api/v1/teams/vision/members/", {"username": SURROGATE, "role": "member"}),
    ("post", "/api/v1/adjustments/", {"team": "vision", "memo": SURROGATE}),
]


def _writes():
    from apps.billing.models import Budget
    from apps.jobs.models import Job
    from apps.reservations.models import Reservation
    from apps.teams.models import Membership

    return (
        Job.objects.count(),
        Budget.objects.count(),
        Reservation.objects.count(),
        sorted(Membership.objects.values_list("user__username", "role")),
    )


@override_settings(DEBUG=False)
@pytest.mark.parametrize(("method", "url", "payload"), SURROGATE_BODIES)
def test_a_lone_surrogate_in_a_json_body_is_400_and_writes_nothing(
    as_admin, member, method, url, payload
):
    before = _writes()
    # json.dumps writes the surrogate as the escape "\ud800", as a hostile client would.
    response = getattr(as_admin, method)(url, json.dumps(payload), content_type="application/json")
    body = assert_envelope(response, 400, "parse_error")
    assert body["message"] == "Unpaired surrogate characters are not allowed."
    assert _writes() == before


def test_json_problem_finds_surrogates_and_nul_in_keys_and_values():
    assert json_problem({"a": [{"b": SURROGATE}]}, max_depth=5) != ""
    assert json_problem({SURROGATE: 1}, max_depth=5) != ""
    assert json_problem({f"k{NUL}": 1}, max_depth=5) == "Null characters are not allowed."
    assert json_problem({"a": ["\U0001f600 paired is fine", "é"]}, max_depth=5) == ""


@override_settings(DEBUG=False)
@pytest.mark.parametrize("url", ["/", "/jobs/", "/reservations/", "/api/v1/gpus/", "/healthz"])
def test_nul_in_the_session_cookie_is_400_and_the_cookie_is_dropped(client, member, url):
    client.raise_request_exception = False
    client.force_login(member)
    client.cookies[settings.SESSION_COOKIE_NAME] = f"{client.session.session_key}{NUL}"
    response = client.get(url)
    assert response.status_code == 400
    if url.startswith("/api/"):
        assert_envelope(response, 400, "invalid")
        assert response.json()["detail"] == {
            settings.SESSION_COOKIE_NAME: ["Null characters are not allowed."]
        }
    else:
        assert response.content == b"Null characters are not allowed in cookies."
    assert response.cookies[settings.SESSION_COOKIE_NAME]["max-age"] == 0


@override_settings(DEBUG=False)
def test_a_raw_nul_byte_in_the_cookie_header_is_400_and_the_cookie_is_dropped(client):
    client.raise_request_exception = False
    response = client.get("/jobs/", HTTP_COOKIE=f"csrftoken=abc; sessionid=abcdefghij{NUL}klmn")
    assert response.status_code == 400
    assert response.content == b"Null characters are not allowed in cookies."
    assert response.cookies["sessionid"]["max-age"] == 0
    assert "csrftoken" not in response.cookies  # the good one is kept


@override_settings(DEBUG=False)
@pytest.mark.parametrize("token", [f"abc{NUL}def", NUL, f"{'a' * 40}{NUL}"])
def test_nul_in_an_api_token_is_400_not_500(client, token):
    client.raise_request_exception = False
    response = client.get("/api/v1/gpus/", HTTP_AUTHORIZATION=f"Token {token}")
    body = assert_envelope(response, 400, "invalid")
    assert body["detail"] == {"Authorization": ["Null characters are not allowed."]}


@override_settings(DEBUG=False)
def test_nul_in_the_user_agent_of_a_failed_login_is_400_and_records_nothing(client, member):
    from axes.models import AccessAttempt

    client.raise_request_exception = False
    response = client.post(
        "/login/", {"username": "alice", "password": "wrong"}, HTTP_USER_AGENT=f"curl{NUL}"
    )
    assert response.status_code == 400
    assert not AccessAttempt.objects.exists()


def test_the_500_page_renders_whatever_the_session_holds(rf, member):
    """The 500 handler used to render with the request, so its context processors read the
    session again: a session the database refused made the error page fail too."""
    from django.contrib.auth.middleware import get_user
    from django.contrib.sessions.backends.db import SessionStore
    from django.utils.functional import SimpleLazyObject

    from portal.views import error_500

    for path in ("/jobs/", "/api/v1/jobs/"):
        request = rf.get(path)
        request.session = SessionStore(session_key=f"abcdefghijkl{NUL}mnop")
        request.user = SimpleLazyObject(lambda request=request: get_user(request))
        response = error_500(request)
        assert response.status_code == 500
        if path.startswith("/api/"):
            assert json.loads(response.content)["code"] == "server_error"
        else:
            assert b"Something went wrong" in response.content


@override_settings(DEBUG=False)
@pytest.mark.parametrize("method", ["get", "post", "delete"])
@pytest.mark.parametrize("url", ["/api/v1/no-such-thing/", "/api/v1/teams/vision/nonsense/x/"])
def test_an_unknown_api_path_is_404_in_the_error_envelope(as_admin, method, url):
    body = assert_envelope(getattr(as_admin, method)(url), 404, "not_found")
    assert body["message"] == "Not found."


@override_settings(DEBUG=False)
def test_an_unknown_page_is_still_the_html_404_page(client, member):
    client.force_login(member)
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    assert b"404" in response.content
