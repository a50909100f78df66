"""Booking admission with unit quotas: a unit's limit caps its teams' borrowed GPUs together,
counted over every team below it, and never refuses GPUs within a team's guarantee."""

from datetime import timedelta

import pytest

from apps.reservations.booking import reservation_create
from apps.reservations.selectors import free_capacity, quota_verdict
from apps.teams.models import Membership, User
from apps.teams.services import unit_quota_set
from portal.exceptions import PolicyRefusal
from tests.teams.departments import build_departments

pytestmark = pytest.mark.django_db


@pytest.fixture
def org(platform_admin, h100):
    """research (H100 6 / 6) > nlp (2 / 4) and lab > cv (2 / 3)."""
    org = build_departments(platform_admin, h100)
    unit_quota_set(
        unit=org["units"]["research"], gpu_model=h100, guaranteed=6, limit=6, actor=platform_admin
    )
    nlp_member = User.objects.create_user("nlp-member")
    Membership.objects.create(team=org["teams"]["nlp"], user=nlp_member)
    org["users"]["nlp-member"] = nlp_member
    return org


def book(org, team, user, h100, count, start, hours=2):
    return reservation_create(
        team=org["teams"][team],
        user=org["users"][user],
        gpu_model=h100,
        count=count,
        start=start,
        end=start + timedelta(hours=hours),
    )


def test_a_units_limit_refuses_a_borrowed_gpu_once_its_teams_hold_it(org, h100, tomorrow_9):
    book(org, "nlp", "nlp-member", h100, 4, tomorrow_9)  # 2 borrowed: research holds 4
    book(org, "cv", "cv-member", h100, 2, tomorrow_9)  # within cv's guarantee: research 6
    with pytest.raises(PolicyRefusal) as refused:
        book(org, "cv", "cv-member", h100, 1, tomorrow_9)  # borrowed: research 7 > 6
    assert refused.value.code == "quota_exceeded"
    assert "unit Organisation / Research" in str(refused.value)
    assert refused.value.detail["limit"] == 6 and refused.value.detail["booked"] == 6
    # after nlp's booking the unit has room again
    book(org, "cv", "cv-member", h100, 1, tomorrow_9 + timedelta(hours=2))


def test_guaranteed_gpus_pass_a_full_unit(org, h100, tomorrow_9):
    book(org, "nlp", "nlp-member", h100, 4, tomorrow_9)
    book(org, "cv", "cv-member", h100, 2, tomorrow_9)
    verdict = quota_verdict(
        team=org["teams"]["cv"], gpu_model=h100, count=1, start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=1),
    )  # fmt: skip
    assert not verdict.admitted and verdict.refused_by.unit == "research"


def test_a_teams_free_capacity_counts_its_units_other_teams(org, h100, tomorrow_9):
    book(org, "nlp", "nlp-member", h100, 4, tomorrow_9)
    points = free_capacity(
        gpu_model=h100, start=tomorrow_9, end=tomorrow_9 + timedelta(hours=4),
        bucket=timedelta(hours=1), team=org["teams"]["cv"],
    )  # fmt: skip
    # research holds 4 of 6 while nlp's booking lasts: cv may take its guarantee (2) then,
    # then its limit (3)
    assert [free for _, free in points] == [2, 2, 3, 3]
