"""The quota rule's answers for the booking form and job submit: the room over a window, the
windows a booking may not overlap, and the largest guaranteed job."""

from apps.teams.quota_rule import Holdings, QuotaRow, QuotaRule

RULE = QuotaRule(
    [
        QuotaRow("vision", "H100", guaranteed=4, limit=12),
        QuotaRow("vision", None, guaranteed=6, limit=14),
        QuotaRow("nlp", "H100", guaranteed=8, limit=16),
    ]
)


def _holdings() -> Holdings:
    holdings = Holdings()
    holdings.add("vision", "H100", 100, 200, 10)  # a booking
    holdings.add("vision", "L40S", 150, 300, 3)  # counts against the any-model row only
    holdings.add("nlp", "H100", 0, 1000, 16)  # another team's: never vision's
    return holdings


def test_room_over_a_window_takes_the_peak_and_every_row():
    holdings = _holdings()
    assert RULE.room_over("vision", "H100", 0, 100, holdings) == 12
    assert RULE.room_over("vision", "H100", 100, 150, holdings) == 2
    # 10 H100 + 3 L40S: the any-model limit of 14 leaves 1
    assert RULE.room_over("vision", "H100", 0, 1000, holdings) == 1
    assert RULE.room_over("vision", "H100", 200, 300, holdings) == 11
    assert RULE.room_over("vision", "H100", 0, 50, holdings, guarantee=True) == 4
    assert RULE.room_over("speech", "H100", 0, 50, holdings) == 0


def test_full_windows_are_where_count_more_would_pass_a_limit():
    holdings = _holdings()
    assert RULE.full_windows("vision", "H100", 1, 0, 400, holdings) == []
    assert RULE.full_windows("vision", "H100", 2, 0, 400, holdings) == [(150, 200)]
    assert RULE.full_windows("vision", "H100", 3, 0, 400, holdings) == [(100, 200)]
    assert RULE.full_windows("vision", "H100", 12, 0, 400, holdings) == [(100, 300)]
    # more than the limit, or no row at all: the whole window
    assert RULE.full_windows("vision", "H100", 13, 0, 400, holdings) == [(0, 400)]
    assert RULE.full_windows("speech", "H100", 1, 0, 400, holdings) == [(0, 400)]


def test_guarantee_ceiling_is_the_smallest_guarantee_of_the_rows():
    assert RULE.guarantee_ceiling("vision", "H100") == 4
    assert RULE.guarantee_ceiling("vision", "L40S") == 6  # the any-model row
    assert RULE.guarantee_ceiling("speech", "H100") == 0
