"""Scenario run by test_answers_sqlite.py in a subprocess on a fresh SQLite database (the
demo's engine): the booking form's team-bounded free GPUs and suggestions from a typed start,
a node drain that strands a booking (its page and mail), and a Guaranteed job refused above the
guarantee, a booking through the API with a token and its unknown-team error. Prints one JSON
line."""

import json
import os
import re
from datetime import UTC, datetime, timedelta


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.core import mail
    from django.core.exceptions import ValidationError
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.utils import timezone

    from apps.fleet.models import GpuModel, Node
    from apps.fleet.services import node_change_state
    from apps.jobs.services import job_submit
    from apps.outbox.services import outbox_flush
    from apps.reservations.services import reservation_create
    from apps.teams.choices import ApiTokenScope
    from apps.teams.models import Team, User
    from apps.teams.tokens import api_token_create

    setup_test_environment()
    call_command("migrate", verbosity=0)
    call_command("seed_demo", "--without-reservations", stdout=open(os.devnull, "w"))  # noqa: SIM115
    alice, bob = User.objects.get(username="alice"), User.objects.get(username="bob")
    vision, nlp = Team.objects.get(slug="vision"), Team.objects.get(slug="nlp")
    h100 = GpuModel.objects.get(name="H100-SXM-80GB")
    client = Client()
    client.force_login(alice)
    day = (timezone.now() + timedelta(days=2)).date()
    html = client.get(
        "/reservations/new/",
        {"team": "vision", "gpu_model": h100.name, "count": 2, "duration_hours": 2,
         "start": f"{day.isoformat()}T20:00", "tz_offset": 300},
    ).content.decode()  # fmt: skip
    table = html.split('data-testid="timeline"', 1)[1].split("</table>", 1)[0]
    cells = [int(v) for v in re.findall(r'<td class="free-cell[^"]*"[^>]*>(\d+)</td>', table)]
    suggested = re.search(r'data-fill-start="([^"]+)"', html.split('data-testid="suggestions"')[1])

    start = (timezone.now() + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    mine = reservation_create(
        team=vision, user=alice, gpu_model=h100, count=8, start=start,
        end=start + timedelta(hours=2), same_node=True,
    )  # fmt: skip
    reservation_create(
        team=nlp, user=bob, gpu_model=h100, count=8, start=start, end=start + timedelta(hours=2)
    )
    node = Node.objects.get(pk=mine.holdings.first().gpu.node_id)
    node_change_state(node=node, operation="drain", actor=User.objects.get(username="admin"))
    outbox_flush(due_only=False)
    page = client.get(f"/reservations/{mine.pk}/").content.decode()
    try:
        job_submit(
            actor=alice, team=vision, argv=["true"], gpu_model=h100, gpu_count=6,
            max_runtime_seconds=600, priority_class="guaranteed",
        )  # fmt: skip
        refused = ""
    except ValidationError as error:
        refused = error.message_dict["priority_class"][0]
    # Through the API with a token: the token and its user, then the form's team and model, are
    # read with raw SQL.
    _, key = api_token_create(
        user=alice, name="sqlite", scope=ApiTokenScope.READ_WRITE, expires_in_days=7
    )
    api = Client(HTTP_AUTHORIZATION=f"Token {key}")
    later = start + timedelta(hours=4)
    api_body = {"team": "vision", "gpu_model": h100.name, "count": 1,
                "start": later.isoformat(), "duration": "01:00:00"}  # fmt: skip
    booked = api.post("/api/v1/reservations/", api_body, content_type="application/json")
    unknown = api.post(
        "/api/v1/reservations/", {**api_body, "team": "nowhere"}, content_type="application/json"
    )
    print(
        json.dumps(
            {
                "vendor": connection.vendor,
                "max_cell": max(cells),
                "first_suggestion_is_typed_start": bool(suggested)
                and datetime.fromisoformat(suggested.group(1))
                == datetime(day.year, day.month, day.day, 20, tzinfo=UTC) + timedelta(hours=5),
                "stranded_alert": 'data-testid="stranded-gpus"' in page
                and "This booking has no GPU left in service" in page,
                "mail_subjects": [m.subject for m in mail.outbox],
                "refused": refused,
                "api_booked": [booked.status_code, booked.json().get("created_by")],
                "api_unknown_team": [unknown.status_code, unknown.json().get("detail")],
            }
        )
    )


if __name__ == "__main__":
    main()
