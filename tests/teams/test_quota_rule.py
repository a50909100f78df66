"""The one quota rule: what a team holds (bookings and running jobs) and may hold (model row and
any-model row; no row, nothing)."""

from apps.teams.quota_rule import Holdings, QuotaRow, QuotaRule

H100, L40S = "H100", "L40S"


def test_a_team_without_a_row_for_a_model_may_hold_none_of_it():
    rule = QuotaRule([QuotaRow("vision", H100, 4, 8)])
    verdict = rule.admit("vision", L40S, 1, 0, 10, Holdings())
    assert not verdict.admitted and verdict.rows == ()
    assert rule.ceiling("vision", L40S) == 0
    assert rule.ceiling("nlp", H100) == 0
    assert rule.room("nlp", H100, 0, 0) == 0


def test_the_model_row_and_the_any_model_row_both_bound():
    rule = QuotaRule([QuotaRow("vision", H100, 2, 8), QuotaRow("vision", None, 4, 10)])
    held = Holdings()
    held.add("vision", L40S, 0, 10, 3)  # counts against the any-model row only
    held.add("vision", H100, 0, 10, 5)
    # H100: 5 + 3 <= 8, but 8 + 3 > 10 across all models
    verdict = rule.admit("vision", H100, 3, 0, 10, held)
    assert verdict.refused_by == QuotaRow("vision", None, 4, 10) and verdict.held == 8
    assert rule.admit("vision", H100, 2, 0, 10, held).admitted
    # Without the L40S work the H100 row binds first.
    verdict = rule.admit("vision", H100, 4, 0, 10, Holdings())
    assert verdict.admitted and verdict.over_guarantee
    assert rule.room("vision", H100, 5, 8) == 2
    assert rule.room("vision", H100, 0, 0, guarantee=True) == 2
    assert rule.binding("vision", H100, 5, 8).model is None


def test_an_any_model_row_alone_covers_every_model():
    rule = QuotaRule([QuotaRow("vision", None, 0, 4)])
    held = Holdings()
    held.add("vision", L40S, 0, 10, 3)
    assert rule.admit("vision", H100, 1, 0, 10, held).admitted
    assert rule.admit("vision", H100, 2, 0, 10, held).refused_by is not None


def test_holdings_count_the_peak_over_the_window_and_release_before_taking():
    held = Holdings()
    held.add("vision", H100, 0, 10, 4)  # a booking
    held.add("vision", H100, 10, 20, 4)  # the next one, starting as the first ends
    held.add("vision", H100, 5, None, 2)  # a job holding until further notice
    assert held.peak("vision", H100, 0, 20) == 6
    assert held.peak("vision", H100, 0, 5) == 4
    assert held.peak("vision", H100, 20, 30) == 2
    assert held.peak("vision", None, 0, 20) == 6
    assert held.peak("nlp", None, 0, 20) == 0


def test_within_guarantee_only_when_every_row_allows_it():
    rule = QuotaRule([QuotaRow("vision", H100, 4, 8)])
    held = Holdings()
    held.add("vision", H100, 0, 10, 3)
    assert not rule.admit("vision", H100, 1, 0, 10, held).over_guarantee
    assert rule.admit("vision", H100, 2, 0, 10, held).over_guarantee
