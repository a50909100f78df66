"""The what-if result page lists each unit's guarantee wait and sharing incentive under the
per-team tables, from the stored result; with no unit below the root it says so instead."""

import re

import pytest

from apps.jobs.choices import WhatIfStatus
from apps.jobs.models import WhatIfRun

pytestmark = pytest.mark.django_db


def _unit(label, jobs, p50, p99, late, shared, alone, worse) -> dict:
    """A stored unit row: (now, proposed) pairs, times in hours, late as a share."""
    row = {"unit": label}
    for index, when in enumerate(("before", "after")):
        row |= {
            f"jobs_{when}": jobs[index],
            f"guarantee_wait_p50_{when}_h": p50[index],
            f"guarantee_wait_p99_{when}_h": p99[index],
            f"guarantee_wait_late_share_{when}": late[index],
            f"jct_shared_{when}_h": shared[index],
            f"jct_alone_{when}_h": alone[index],
            f"worse_off_than_alone_{when}": worse[index],
        }
    return row


def _team(team: str) -> dict:
    return {"team": team, "jobs": 8, "wait_before_h": 1.5, "wait_after_h": 0.5,
            "p95_wait_before_h": 2.0, "p95_wait_after_h": 1.0, "slowdown_before": 1.2,
            "slowdown_after": 1.1, "lost_gpu_hours_before": 0.0, "lost_gpu_hours_after": 0.0,
            "gpu_hours_before": 64.0, "gpu_hours_after": 64.0, "cost_before": "128.00",
            "cost_after": "128.00"}  # fmt: skip


def _run(platform_admin, units) -> WhatIfRun:
    result = {
        "jobs": 16, "gpus": 16, "teams": [_team("nlp"), _team("vision")],
        "before": {"jain_fairness": 0.9, "preemptions": 0},
        "after": {"jain_fairness": 0.95, "preemptions": 1},
        "currency": "USD", "too_few_jobs": False, "min_jobs": 10, "nobody_waited": False,
    }  # fmt: skip
    if units is not None:
        result["units"] = units
    return WhatIfRun.objects.create(
        window="7d", policy="fairshare", created_by=platform_admin,
        status=WhatIfStatus.DONE, progress=100, result=result,
    )  # fmt: skip


def _cells(html: str, unit: str) -> dict[str, str]:
    row = re.search(rf'<tr data-unit="{re.escape(unit)}"[^>]*>(.*?)</tr>', html, re.S).group(1)
    return dict(re.findall(r'<td data-col="([a-z0-9-]+)">(.*?)</td>', row))


def test_the_units_table_shows_the_stored_rows(client, platform_admin):
    units = [
        _unit("Organisation", (16, 16), (0.25, 0.1), (1.75, 0.5), (0.5, 0.25), (3.0, 2.5),
              (2.0, 2.0), (True, False)),
        _unit("Organisation / Research", (8, 8), (0.5, 0.0), (2.25, 0.75), (0.5, 0.0),
              (4.25, 2.0), (None, 2.0), (False, False)),
        _unit("Organisation / Research / Lab", (3, 3), (1.0, 0.2), (3.5, 0.4), (1.0, 0.0),
              (5.0, 6.5), (2.0, 2.5), (True, True)),
    ]  # fmt: skip
    run = _run(platform_admin, units)
    client.force_login(platform_admin)
    html = client.get(f"/jobs/what-if/?run={run.pk}").content.decode()
    # under the per-team tables
    assert html.index('data-testid="whatif-result"') < html.index('data-testid="whatif-units"')
    assert 'data-testid="whatif-units-empty"' not in html
    research = _cells(html, "Organisation / Research")
    assert research == {
        "p50-now": "0.50", "p50-proposed": "0.00", "p99-now": "2.25", "p99-proposed": "0.75",
        "jct-now": "4.25", "alone-now": "—", "jct-proposed": "2.00", "alone-proposed": "2.00",
        "worse-proposed": "no",
    }  # fmt: skip
    lab = _cells(html, "Organisation / Research / Lab")
    assert (lab["p99-now"], lab["jct-proposed"], lab["worse-proposed"]) == ("3.50", "6.50", "yes")
    assert re.search(r'<tr data-unit="Organisation / Research / Lab" data-depth="2" class="warn">',
                     html)  # fmt: skip
    assert ">50</td><td>0</td>" in html  # research's late share, now and proposed, in percent


@pytest.mark.parametrize(
    "units",
    [
        [_unit("Organisation", (16, 16), (0, 0), (1, 1), (0, 0), (3, 3), (2, 2), (0, 0))],
        None,  # a result stored before runs reported units
    ],
)
def test_without_units_below_the_root_the_page_says_so(client, platform_admin, units):
    run = _run(platform_admin, units)
    client.force_login(platform_admin)
    html = client.get(f"/jobs/what-if/?run={run.pk}").content.decode()
    assert 'data-testid="whatif-units-empty"' in html
    assert 'data-testid="whatif-units"' not in html
    assert 'data-testid="whatif-result"' in html
