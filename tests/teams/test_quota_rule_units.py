"""The quota rule with organisation units: a unit row caps the borrowing of all its teams
together, never what a team holds within its own guarantee; no unit rows, the flat rule."""

import pytest

from apps.teams.org_tree import OrgTree
from apps.teams.quota_rule import Ceiling, Holdings, QuotaRow, QuotaRule, UnitQuotaRow

H100, L40S = "H100", "L40S"

# org > research > {vision, nlp}; org > ops > {infra}
TREE = OrgTree(
    {"org": None, "research": "org", "ops": "org"},
    {"vision": "research", "nlp": "research", "infra": "ops"},
)
TEAMS = [
    QuotaRow("vision", H100, 2, 8),
    QuotaRow("nlp", H100, 2, 8),
    QuotaRow("infra", H100, 2, 8),
]


def research_capped(limit: int, model=H100) -> QuotaRule:
    return QuotaRule(TEAMS, [UnitQuotaRow("research", model, 4, limit)], TREE)


def test_a_unit_limit_caps_the_borrowing_of_its_teams_together():
    rule = research_capped(6)
    held = Holdings()
    held.add("nlp", H100, 0, 10, 4)  # nlp borrows 2 above its guarantee
    held.add("vision", H100, 0, 10, 2)  # vision at its guarantee
    # vision borrowing 1 more: research would hold 7 > 6
    verdict = rule.admit("vision", H100, 1, 0, 10, held)
    assert not verdict.admitted
    assert verdict.refused_by == UnitQuotaRow("research", H100, 4, 6) and verdict.held == 6
    # infra, outside research, is not capped by it
    assert rule.admit("infra", H100, 5, 0, 10, held).admitted
    # after nlp's work ends, the cap has room again
    assert rule.admit("vision", H100, 1, 10, 20, held).admitted


def test_guaranteed_gpus_are_never_refused_by_a_unit_limit():
    rule = research_capped(6)
    held = Holdings()
    held.add("nlp", H100, 0, 10, 6)  # nlp borrowed research up to its limit
    verdict = rule.admit("vision", H100, 2, 0, 10, held)
    assert verdict.admitted and not verdict.over_guarantee
    assert not rule.admit("vision", H100, 3, 0, 10, held).admitted  # the third GPU borrows


def test_room_agrees_with_admit_and_reads_the_unit_holding():
    rule = research_capped(6)
    # vision holds 1, research holds 5: 1 more within the guarantee... or borrowed up to 6
    assert rule.room("vision", H100, 1, 1, unit_held={("research", H100): 5}) == 1
    assert rule.room("vision", H100, 1, 1, unit_held={("research", H100): 6}) == 1  # guarantee
    assert rule.room("vision", H100, 0, 0, unit_held={("research", H100): 0}) == 6
    assert rule.room("vision", H100, 1, 1, guarantee=True, unit_held={}) == 1
    held = Holdings()
    held.add("nlp", H100, 0, 10, 4)
    held.add("vision", H100, 0, 10, 1)
    assert rule.room_over("vision", H100, 0, 10, held) == 1
    assert rule.admit("vision", H100, 1, 0, 10, held).admitted
    assert not rule.admit("vision", H100, 2, 0, 10, held).admitted


def test_an_any_model_unit_row_caps_every_model_and_rows_nest_to_the_root():
    rule = QuotaRule(
        [*TEAMS, QuotaRow("vision", L40S, 0, 16)],
        [UnitQuotaRow("research", None, 4, 8), UnitQuotaRow("org", H100, 6, 9)],
        TREE,
    )
    held = Holdings()
    held.add("vision", L40S, 0, 10, 7)
    # research's any-model row holds 7: 2 H100 within vision's guarantee pass it, 2 borrowed
    # L40S do not
    assert rule.admit("vision", H100, 2, 0, 10, held).admitted
    verdict = rule.admit("vision", L40S, 2, 0, 10, held)
    assert verdict.refused_by == UnitQuotaRow("research", None, 4, 8) and verdict.held == 7
    held.add("infra", H100, 0, 10, 5)
    held.add("nlp", H100, 0, 10, 2)  # org holds 7 H100
    verdict = rule.admit("infra", H100, 3, 0, 10, held)  # borrowed: org 10 > 9
    assert verdict.refused_by == UnitQuotaRow("org", H100, 6, 9)
    assert rule.admit("infra", H100, 2, 0, 10, held).admitted
    assert rule.ceiling("nlp", H100) == 8
    assert research_capped(5).ceiling("vision", H100) == 5
    assert [r.unit for r in rule.unit_rows_for("vision", H100)] == ["research", "org"]


def test_full_windows_count_the_units_other_teams():
    rule = research_capped(6)
    held = Holdings()
    held.add("nlp", H100, 5, 15, 5)
    # vision wants 2 (borrowing beyond 0 held? its guarantee is 2: within) -> never full
    assert rule.full_windows("vision", H100, 2, 0, 20, held) == []
    # 3 GPUs pass its guarantee: full while nlp holds 5
    assert rule.full_windows("vision", H100, 3, 0, 20, held) == [(5, 15)]


@pytest.mark.parametrize("tree", [None, OrgTree({"org": None}, {t.team: "org" for t in TEAMS})])
def test_without_unit_rows_the_rule_is_the_flat_one(tree):
    flat, nested = QuotaRule(TEAMS), QuotaRule(TEAMS, [], tree)
    held = Holdings()
    held.add("nlp", H100, 0, 10, 7)
    held.add("vision", H100, 3, 8, 5)
    for team in ("vision", "nlp", "infra"):
        for count in range(10):
            assert flat.admit(team, H100, count, 0, 10, held) == nested.admit(
                team, H100, count, 0, 10, held
            )
            assert flat.full_windows(team, H100, count, 0, 10, held) == nested.full_windows(
                team, H100, count, 0, 10, held
            )
        assert flat.room(team, H100, 3, 3) == nested.room(team, H100, 3, 3)
    assert not nested.has_unit_rows


def test_unit_rows_without_a_tree_are_ignored():
    rule = QuotaRule(TEAMS, [UnitQuotaRow("research", H100, 0, 0)])
    assert rule.admit("vision", H100, 8, 0, 10, Holdings()).admitted


def test_the_binding_ceiling_names_the_row_that_sets_it():
    vision_h100, vision_any = QuotaRow("vision", H100, 2, 8), QuotaRow("vision", None, 2, 10)
    rule = QuotaRule(
        [vision_h100, vision_any, QuotaRow("vision", L40S, 3, 12)],
        [UnitQuotaRow("research", H100, 4, 6), UnitQuotaRow("org", None, 6, 9)],
        TREE,
    )
    # H100: research's limit (6) is below the team's (8); L40S: org's any-model row (9) is
    # below the team's L40S row (12) and its any-model row (10).
    assert rule.binding_ceiling("vision", H100) == Ceiling(6, UnitQuotaRow("research", H100, 4, 6))
    assert rule.binding_ceiling("vision", L40S) == Ceiling(9, UnitQuotaRow("org", None, 6, 9))
    # Within the guarantee the team's own lowest guarantee binds, whatever the units say.
    assert rule.binding_ceiling("vision", H100, guarantee=True) == Ceiling(2, vision_h100)
    assert rule.guarantee_ceiling("vision", L40S) == 2
    # Units above with higher limits: the team's own rows bind, the model row on a tie.
    loose = QuotaRule([vision_h100, vision_any], [UnitQuotaRow("research", H100, 4, 20)], TREE)
    assert loose.binding_ceiling("vision", H100) == Ceiling(8, vision_h100)
    tie = QuotaRule([vision_h100, QuotaRow("vision", None, 2, 8)], [], TREE)
    assert tie.binding_ceiling("vision", H100).row == vision_h100
    any_tighter = QuotaRule([vision_h100, QuotaRow("vision", None, 0, 5)])
    assert any_tighter.binding_ceiling("vision", H100) == Ceiling(5, QuotaRow("vision", None, 0, 5))
    # A unit's limit caps borrowing only: never below the team's guarantee.
    low = QuotaRule([QuotaRow("vision", H100, 4, 8)], [UnitQuotaRow("research", H100, 4, 3)], TREE)
    assert low.ceiling("vision", H100) == 4
    # No row: nothing, and no row to name.
    assert rule.binding_ceiling("infra", H100) == Ceiling(0, None)
    # ceiling() is the same answer.
    assert rule.ceiling("vision", H100) == 6 and rule.ceiling("vision", L40S) == 9
