"""Every team-owned model is read through `for_user`: a user sees their teams' rows, finance
and platform admins every team's, and `member_of` is where a user may book or submit."""

import pytest
from django.utils import timezone

from apps.billing.models import Budget
from apps.jobs.models import Job
from apps.reservations.models import Reservation
from apps.teams.models import Quota, Team
from tests.factories import BudgetFactory, JobFactory, ReservationFactory

pytestmark = pytest.mark.django_db


def test_team_owned_rows_follow_the_users_teams(member, team, other_team, finance_user, h100):
    now = timezone.now()
    for owner in (team, other_team):
        ReservationFactory(team=owner, created_by=member, gpu_model=h100, start=now)
        JobFactory(team=owner, submitted_by=member, gpu_model=h100)
        BudgetFactory(team=owner)
        Quota.objects.create(team=owner, gpu_model=h100, guaranteed=1, limit=2)
    for model in (Reservation, Job, Budget, Quota):
        assert set(model.objects.for_user(member).values_list("team__slug", flat=True)) == {
            "vision"
        }, model
        assert model.objects.for_user(finance_user).count() == 2, model
    assert list(Team.objects.member_of(member)) == [team]
    assert list(Team.objects.member_of(finance_user)) == []  # sees all, belongs to none
    Team.objects.filter(pk=team.pk).update(is_active=False)
    assert list(Team.objects.member_of(member)) == []
