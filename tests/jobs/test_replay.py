"""manage.py replay_trace on a slice of the shared Alibaba trace and on a generic CSV."""

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

TRACES = Path(__file__).resolve().parents[3] / "shared" / "data" / "traces"
PODS = TRACES / "alibaba_openb_pod_list_default.csv"


@pytest.mark.skipif(not PODS.exists(), reason="shared traces not present")
def test_alibaba_slice_replays_beside_fifo(tmp_path):
    out = StringIO()
    call_command("replay_trace", str(PODS), "--fleet", "2x8:GPU", "--limit", "150",
                 "--out", str(tmp_path), stdout=out)  # fmt: skip
    text = out.getvalue()
    assert "fairshare" in text and "fifo" in text and "Jain fairness" in text
    document = json.loads((tmp_path / "replay.json").read_text())
    assert document["jobs"] == 150 and document["gpus"] == 16
    assert document["row_counts"]["fractional_rounded_up"] > 0  # shared GPUs rounded up, counted
    for result in document["results"].values():
        assert result["finished"] + result["never_fit"] == 150
        assert 0 < result["utilization"] <= 1
        assert set(result["team_avg_wait"]) <= {"LS", "BE", "Burstable", "Guaranteed"}
    html = (tmp_path / "replay.html").read_text()
    # plotly.js is embedded (no <script src> to a CDN), so the report opens offline
    assert "Plotly.newPlot" in html and 'src="https://cdn.plot.ly' not in html
    assert len(html) > 1_000_000


def test_generic_trace_with_named_columns(tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text("t,len,n,who\n0,3600,4,a\n0,3600,4,b\n10,3600,4,a\n")
    out = StringIO()
    call_command("replay_trace", str(trace), "--fleet", "1x8:H100", "--policy", "sjf",
                 "--submit-column", "t", "--duration-column", "len", "--gpus-column", "n",
                 "--team-column", "who", "--out", str(tmp_path), stdout=out)  # fmt: skip
    results = json.loads((tmp_path / "replay.json").read_text())["results"]
    assert set(results) == {"sjf", "fifo"}
    # 8 GPUs, three 4-GPU jobs of an hour: two run at once, the third waits an hour.
    assert results["fifo"]["finished"] == 3
    assert results["fifo"]["p95_wait"] == pytest.approx(3600, abs=60)


def test_bad_inputs_are_command_errors(tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text("submit,duration,gpus,team\n0,abc,1,a\n")
    with pytest.raises(CommandError, match="not a number"):
        call_command("replay_trace", str(trace), "--fleet", "1x8:H100", "--out", str(tmp_path))
    trace.write_text("submit,duration,gpus,team\n0,60,1,a\n")
    with pytest.raises(CommandError):
        call_command("replay_trace", str(trace), "--fleet", "eight GPUs", "--out", str(tmp_path))
    with pytest.raises(CommandError):
        call_command("replay_trace", str(tmp_path / "missing.csv"), "--fleet", "1x8:H100")
