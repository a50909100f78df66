"""A drain tells each booking's owner what happened: a moved booking's page says where it went
and why; a booking left on GPUs out of service is warned by mail and on its page, and the mail
says what is left of it."""

from datetime import timedelta

import pytest

from apps.fleet.models import Node
from apps.fleet.services import gpu_change_state, node_change_state
from apps.reservations.models import ReservationGpu
from apps.reservations.services import reservation_create

pytestmark = pytest.mark.django_db


def _book(team, user, h100, start, count, **kw):
    return reservation_create(
        team=team, user=user, gpu_model=h100, count=count, start=start,
        end=start + timedelta(hours=2), **kw,
    )  # fmt: skip


def _page(client, user, reservation) -> str:
    client.force_login(user)
    return client.get(f"/reservations/{reservation.pk}/").text


def test_moved_booking_page_says_from_where_to_where_and_why(
    client, member, platform_admin, quotas, h100, tomorrow_9
):
    booking = _book(quotas[0].team, member, h100, tomorrow_9, 2)
    victim = booking.holdings.first().gpu
    gpu_change_state(gpu=victim, operation="drain", actor=platform_admin, reason="fan")
    moved = ReservationGpu.objects.get(reservation=booking, active=True, moved_from=victim)
    assert moved.change_reason == f"{victim} was drained" and moved.changed_at is not None
    html = _page(client, member, booking)
    notice = html.split('data-testid="moved-gpus"', 1)[1].split("</section>", 1)[0]
    assert f"Moved from {victim} to {moved.gpu} on <time" in notice
    assert f"because {victim} was drained." in notice
    assert 'data-testid="stranded-gpus"' not in html


def test_node_drain_names_the_node(
    client, member, platform_admin, quotas, h100, tomorrow_9, mailoutbox,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    booking = _book(quotas[0].team, member, h100, tomorrow_9, 2, same_node=True)
    node = Node.objects.get(pk=booking.holdings.first().gpu.node_id)
    with django_capture_on_commit_callbacks(execute=True):
        node_change_state(node=node, operation="drain", actor=platform_admin, reason="firmware")
    (mail,) = mailoutbox
    assert f"2 GPUs of your booking #{booking.pk}" in mail.body
    assert f"left service because node {node.hostname} was drained, so" in mail.body
    html = _page(client, member, booking)
    assert html.count(f"because node {node.hostname} was drained.") == 2


def _fill_the_other_node(outsider, quotas, h100, start):
    return _book(quotas[1].team, outsider, h100, start, 8)


def test_booking_left_with_nothing_is_warned_by_mail_and_on_its_page(
    client, member, outsider, platform_admin, quotas, h100, tomorrow_9, mailoutbox,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    mine = _book(quotas[0].team, member, h100, tomorrow_9, 8, same_node=True)
    _fill_the_other_node(outsider, quotas, h100, tomorrow_9)
    node = Node.objects.get(pk=mine.holdings.first().gpu.node_id)
    with django_capture_on_commit_callbacks(execute=True):
        node_change_state(node=node, operation="drain", actor=platform_admin)
    (mail,) = mailoutbox
    assert mail.subject == f"GPU reservation #{mine.pk} lost 8 GPUs"
    assert member.email in mail.to
    assert f"because node {node.hostname} was drained" in mail.body
    assert "keeps" not in mail.body
    assert "The booking has no GPU left in service" in mail.body
    assert ReservationGpu.objects.filter(reservation=mine, stranded=True).count() == 8
    html = _page(client, member, mine)
    alert = html.split('data-testid="stranded-gpus"', 1)[1].split("</div>", 1)[0]
    assert alert.count(f"because node {node.hostname} was drained, and no other") == 8
    assert "This booking has no GPU left in service" in alert


def test_booking_that_keeps_some_gpus_says_how_many(
    client, member, outsider, platform_admin, quotas, h100, tomorrow_9, mailoutbox,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    # vision holds 4 on one node; nlp fills the other node and the rest of the first
    mine = _book(quotas[0].team, member, h100, tomorrow_9, 4, same_node=True)
    _fill_the_other_node(outsider, quotas, h100, tomorrow_9)
    _book(quotas[1].team, outsider, h100, tomorrow_9, 4)
    lost = mine.holdings.order_by("gpu__index").first().gpu
    with django_capture_on_commit_callbacks(execute=True):
        gpu_change_state(gpu=lost, operation="drain", actor=platform_admin)
    (mail,) = mailoutbox
    assert mail.subject == f"GPU reservation #{mine.pk} lost 1 GPU"
    assert "The booking keeps its other 3 GPUs." in mail.body
    html = _page(client, member, mine)
    alert = html.split('data-testid="stranded-gpus"', 1)[1].split("</div>", 1)[0]
    assert f"{lost} left service on" in alert and "The booking keeps its other GPUs." in alert


def test_stranded_warning_goes_when_the_gpu_is_back_in_service(
    client, member, outsider, platform_admin, quotas, h100, tomorrow_9
):
    mine = _book(quotas[0].team, member, h100, tomorrow_9, 8, same_node=True)
    _fill_the_other_node(outsider, quotas, h100, tomorrow_9)
    node = Node.objects.get(pk=mine.holdings.first().gpu.node_id)
    node_change_state(node=node, operation="drain", actor=platform_admin)
    assert 'data-testid="stranded-gpus"' in _page(client, member, mine)
    node_change_state(node=node, operation="undrain", actor=platform_admin)
    assert 'data-testid="stranded-gpus"' not in _page(client, member, mine)


def test_maintenance_window_strands_until_it_is_cancelled(
    client, member, outsider, platform_admin, quotas, h100, tomorrow_9
):
    from apps.fleet.services import maintenance_cancel, maintenance_schedule

    mine = _book(quotas[0].team, member, h100, tomorrow_9, 8, same_node=True)
    _fill_the_other_node(outsider, quotas, h100, tomorrow_9)
    node = Node.objects.get(pk=mine.holdings.first().gpu.node_id)
    window, report = maintenance_schedule(
        node=node, start=tomorrow_9, end=tomorrow_9 + timedelta(hours=1), reason="cooling",
        actor=platform_admin,
    )  # fmt: skip
    assert len(report["unresolved"]) == 8
    html = _page(client, member, mine)
    assert f"because node {node.hostname} has a maintenance window, and no other" in html
    maintenance_cancel(window=window, actor=platform_admin)
    assert 'data-testid="stranded-gpus"' not in _page(client, member, mine)
