"""The fleet page after a drain: what it shows, one summary banner, and the teams told."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.fleet.models import Gpu
from apps.reservations.choices import ReservationStatus
from apps.reservations.models import Reservation, ReservationGpu
from apps.reservations.services import reservation_create

pytestmark = pytest.mark.django_db


def _running(reservation: Reservation) -> Reservation:
    """Make a booking one that started an hour ago and is running now."""
    started = timezone.now() - timedelta(hours=1)
    Reservation.objects.filter(pk=reservation.pk).update(
        start=started, status=ReservationStatus.ACTIVE
    )
    ReservationGpu.objects.filter(reservation=reservation).update(start=started)
    return Reservation.objects.get(pk=reservation.pk)


def _node_card(html: str, hostname: str) -> str:
    return html.split(f'data-node="{hostname}"', 1)[1].split("</section>", 1)[0]


def test_drained_node_shows_no_open_bookings_and_no_gpu_drain_buttons(
    client, member, outsider, platform_admin, quotas, h100, tomorrow_9,
    django_capture_on_commit_callbacks, mailoutbox,
):  # fmt: skip
    mine = _running(
        reservation_create(
            team=quotas[0].team, user=member, gpu_model=h100, count=3, same_node=True,
            start=tomorrow_9, end=tomorrow_9 + timedelta(hours=4),
        )
    )  # fmt: skip
    theirs = _running(
        reservation_create(
            team=quotas[1].team, user=outsider, gpu_model=h100, count=2, same_node=True,
            start=tomorrow_9, end=tomorrow_9 + timedelta(hours=4),
        )
    )  # fmt: skip
    node = mine.holdings.first().gpu.node
    assert theirs.holdings.first().gpu.node == node
    client.force_login(platform_admin)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/fleet/nodes/{node.pk}/drain/", {"reason": "bios"}, follow=True)
    html = response.text
    card = _node_card(html, node.hostname)
    assert re.search(r"\b0 open GPU bookings?\b", card), card[:400]
    assert "Drain GPU" not in card
    assert ">Active<" not in card
    assert card.count("Out of service (node drained)") == Gpu.objects.filter(node=node).count()

    # One summary banner for the five moved GPUs of the two bookings, not one per GPU.
    banners = re.findall(r'<li class="message info">(.*?)</li>', html, re.S)
    assert len(banners) == 1
    assert "5 booked GPUs of 2 reservations moved to other GPUs" in banners[0]
    assert f"#{mine.pk} (vision, 3 GPUs to " in banners[0]

    # Each team is told where its booking went, naming the new node.
    moved_mails = [m for m in mailoutbox if "moved to" in m.subject]
    assert len(moved_mails) == 2
    new_node = mine.holdings.filter(active=True, end__gt=timezone.now() + timedelta(minutes=2))
    new_node = new_node.first().gpu.node.hostname
    mail = next(m for m in moved_mails if f"#{mine.pk}" in m.subject)
    assert new_node != node.hostname
    assert new_node in mail.subject and new_node in mail.body
    assert member.email in mail.to
