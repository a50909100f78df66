from datetime import timedelta

import pytest

from apps.audit.models import AuditEvent
from apps.reservations.models import Reservation
from apps.teams.models import Quota

pytestmark = pytest.mark.django_db


def _form(start_local, **extra):
    return {
        "team": "vision",
        "gpu_model": "H100-SXM-80GB",
        "count": 2,
        "start": start_local.strftime("%Y-%m-%dT%H:%M"),
        "duration_hours": "2",
        "tz_offset": "0",
        **extra,
    }


def test_booking_form_converts_browser_local_time_to_utc(client, member, quotas, tomorrow_9):
    client.force_login(member)
    berlin_local = tomorrow_9 + timedelta(hours=1)  # 10:00 in Berlin (UTC+1 in December)
    response = client.post("/reservations/new/", _form(berlin_local, tz_offset="-60"))
    assert response.status_code == 302
    reservation = Reservation.objects.get()
    assert reservation.start == tomorrow_9
    assert reservation.end == tomorrow_9 + timedelta(hours=2)


def test_booking_form_shows_conflict_inline_with_next_slot(
    client, member, outsider, quotas, tomorrow_9
):
    from apps.reservations.services import reservation_create

    reservation_create(
        team=quotas[1].team,
        user=outsider,
        gpu_model=quotas[1].gpu_model,
        count=16,
        start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=3),
    )
    client.force_login(member)
    page = client.post("/reservations/new/", _form(tomorrow_9)).content.decode()
    assert "Only 0 H100-SXM-80GB GPUs are free" in page
    # Times in messages follow the pages' one format, the zone named.
    assert f"from {tomorrow_9:%b} {tomorrow_9.day}, {tomorrow_9.year}, 09:00 UTC to " in page
    assert "Use the next free slot" in page
    assert not Reservation.objects.filter(team__slug="vision").exists()


def test_booking_form_field_errors_render_next_to_fields(client, member, quotas):
    client.force_login(member)
    page = client.post(
        "/reservations/new/", _form(__import__("datetime").datetime(2020, 1, 1, 9, 0))
    ).content.decode()
    assert "The start is in the past." in page
    assert not Reservation.objects.exists()


def test_reserve_page_suggests_slots_and_shows_free_capacity(client, member, quotas):
    client.force_login(member)
    page = client.get(
        "/reservations/new/", {"gpu_model": "H100-SXM-80GB", "count": 8, "duration_hours": 2}
    ).content.decode()
    assert page.count("Use this slot") == 1  # everything free: one open-ended window
    # 16 H100s are free; the table counts what vision may book: its limit of 12.
    assert 'data-testid="timeline"' in page and ">12</td>" in page and ">16</td>" not in page


def test_my_reservations_cancel_and_extend_through_pages(client, member, quotas, tomorrow_9):
    client.force_login(member)
    client.post("/reservations/new/", _form(tomorrow_9))
    reservation = Reservation.objects.get()
    listing = client.get("/reservations/?when=upcoming").content.decode()
    assert f'data-reservation="{reservation.pk}"' in listing
    client.post(f"/reservations/{reservation.pk}/extend/", {"extra_hours": "1.5"})
    reservation.refresh_from_db()
    assert reservation.end == tomorrow_9 + timedelta(hours=3, minutes=30)
    response = client.post(f"/reservations/{reservation.pk}/cancel/", follow=True)
    assert "cancelled; its GPUs are free again" in response.content.decode()
    assert Reservation.objects.get().status == "cancelled"


def test_other_teams_reservation_pages_are_404(client, member, outsider, quotas, tomorrow_9):
    from apps.reservations.services import reservation_create

    theirs = reservation_create(
        team=quotas[1].team,
        user=outsider,
        gpu_model=quotas[1].gpu_model,
        count=1,
        start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=1),
    )
    client.force_login(member)
    assert client.post(f"/reservations/{theirs.pk}/cancel/").status_code == 404
    assert client.get("/reservations/calendar/nlp/").status_code == 404
    assert Reservation.objects.get(pk=theirs.pk).status == "scheduled"


def test_quota_page_admin_edits_inline_and_sees_history(client, platform_admin, quotas):
    client.force_login(platform_admin)
    response = client.post(
        "/quotas/",
        {"team": "vision", "gpu_model": "H100-SXM-80GB", "guaranteed": 4, "limit": 10},
        follow=True,
    )
    page = response.content.decode()
    assert "Quota of vision saved." in page
    assert Quota.objects.get(team__slug="vision").limit == 10
    assert "4 / 12" in page and "4 / 10" in page  # history: before and after
    bad = client.post(
        "/quotas/", {"team": "vision", "gpu_model": "H100-SXM-80GB", "guaranteed": 5, "limit": 2}
    )
    assert "must be at least" in bad.content.decode()
    assert Quota.objects.get(team__slug="vision").limit == 10
    assert AuditEvent.objects.filter(action="quota.change").count() == 1


def test_quota_page_warns_when_guarantees_exceed_healthy_capacity(client, platform_admin, quotas):
    Quota.objects.filter(team__slug="nlp").update(guaranteed=14, limit=16)
    client.force_login(platform_admin)
    page = client.get("/quotas/").content.decode()
    assert "Guarantees for H100-SXM-80GB add up to 18 GPUs, more than the 16 healthy ones" in page


def test_quota_page_is_read_only_for_finance_and_forbidden_for_members(
    client, finance_user, member, quotas
):
    client.force_login(finance_user)
    page = client.get("/quotas/").content.decode()
    assert 'data-quota="vision/H100-SXM-80GB"' in page and "Save quota" not in page
    assert (
        client.post("/quotas/", {"team": "vision", "guaranteed": 0, "limit": 0}).status_code == 403
    )
    client.force_login(member)
    assert client.get("/quotas/").status_code == 403


def test_team_page_shows_quota_usage(client, member, quotas, tomorrow_9):
    from apps.reservations.services import reservation_create

    reservation_create(
        team=quotas[0].team,
        user=member,
        gpu_model=quotas[0].gpu_model,
        count=3,
        start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=1),
    )
    client.force_login(member)
    page = client.get("/teams/vision/").content.decode()
    assert "<td>H100-SXM-80GB</td><td>4</td><td>12</td><td>0</td><td>3</td><td>9</td>" in page


def test_free_capacity_table_has_aligned_whole_days(client, member, quotas):
    import re

    client.force_login(member)
    page = client.get("/reservations/new/", {"gpu_model": "H100-SXM-80GB"}).content.decode()
    table = page[page.index('data-testid="timeline"') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r"<tr><th scope=\"row\">.*?</tr>", table, re.S)
    assert len(rows) == 8  # today and the next 7 days
    assert {row.count("<td") for row in rows} == {8}  # 00:00 to 21:00 in every row
    assert re.findall(r'<th scope="col">(\d\d:\d\d)</th>', table)[0] == "00:00"
