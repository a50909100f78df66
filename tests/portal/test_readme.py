"""The README's opening says what the portal does today."""

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_opening_describes_jobs_chargeback_and_dashboards_as_there():
    opening = README.read_text().split("## ", 1)[0].lower()
    assert "next stage" not in opening
    for feature in ("jobs", "scheduler", "chargeback", "focus", "dashboards", "what-if"):
        assert feature in opening, feature
