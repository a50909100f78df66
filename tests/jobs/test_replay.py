"""manage.py replay_trace on a slice of the shared Alibaba trace and on a generic CSV."""

import csv
import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

# The first 300 pods of the public Alibaba GPU trace (samples/traces/README.md: source, licence).
PODS = (
    Path(__file__).resolve().parents[2] / "samples" / "traces" / "alibaba_openb_pod_list_head.csv"
)


def test_alibaba_slice_replays_beside_fifo(tmp_path):
    out = StringIO()
    call_command("replay_trace", str(PODS), "--fleet", "2x8:GPU", "--limit", "150",
                 "--out", str(tmp_path), stdout=out)  # fmt: skip
    text = out.getvalue()
    assert "fairshare" in text and "fifo" in text and "Jain slowdown" in text
    document = json.loads((tmp_path / "replay.json").read_text())
    assert document["jobs"] == 150 and document["gpus"] == 16
    assert document["row_counts"]["fractional_rounded_up"] > 0  # shared GPUs rounded up, counted
    for result in document["results"].values():
        assert result["finished"] + result["never_fit"] == 150
        assert 0 < result["utilization"] <= 1
        assert set(result["team_avg_wait"]) <= {"LS", "BE", "Burstable", "Guaranteed"}
    html = (tmp_path / "replay.html").read_text()
    assert "jobs queued over time" in html
    # plotly.js is embedded (no <script src> to a CDN), so the report opens offline
    assert "Plotly.newPlot" in html and 'src="https://cdn.plot.ly' not in html
    assert len(html) > 1_000_000
    # what teams see, per policy: guarantee wait, shared vs alone, rho
    assert "guarantee wait p50" in text and "teams worse off than alone" in text
    for metrics in document["teams"].values():
        assert metrics["within_guarantee_jobs"] > 0
        assert set(metrics["teams"]) <= {"LS", "BE", "Burstable", "Guaranteed"}


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


def test_spare_order_option_is_passed_to_the_replay_and_checked(tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text("submit,duration,gpus,team\n0,3600,8,a\n0,60,4,b\n0,3600,4,c\n")
    for order in ("share", "las", "tiresias", "slowdown"):
        call_command("replay_trace", str(trace), "--fleet", "1x8:H100", "--spare-order", order,
                     "--out", str(tmp_path), stdout=StringIO())  # fmt: skip
        results = json.loads((tmp_path / "replay.json").read_text())["results"]
        assert results["fairshare"]["finished"] == 3
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("replay_trace", str(trace), "--fleet", "1x8:H100", "--spare-order", "lifo",
                     "--out", str(tmp_path), stdout=StringIO())  # fmt: skip


def test_runtime_limits_option_picks_classes_or_the_oracle(tmp_path):
    # b's 60-s job and c's 3,000-s one both fall in the 1-hour class: sjf cannot tell them
    # apart and runs c first (submitted first), unless told the true durations.
    trace = tmp_path / "jobs.csv"
    trace.write_text("submit,duration,gpus,team\n0,600,8,a\n1,3000,8,c\n2,60,8,b\n")
    waits = {}
    for limits in ("classes", "exact"):
        call_command("replay_trace", str(trace), "--fleet", "1x8:H100", "--policy", "sjf",
                     "--runtime-limits", limits, "--out", str(tmp_path),
                     stdout=StringIO())  # fmt: skip
        waits[limits] = json.loads((tmp_path / "replay.json").read_text())["results"]["sjf"]
    assert waits["classes"]["team_avg_wait"]["b"] == pytest.approx(3000 + 600 - 2)
    assert waits["exact"]["team_avg_wait"]["b"] == pytest.approx(600 - 2)
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("replay_trace", str(trace), "--fleet", "1x8:H100", "--runtime-limits",
                     "guess", "--out", str(tmp_path), stdout=StringIO())  # fmt: skip


def test_bad_rows_are_counted_by_reason_with_line_numbers(tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text(
        "submit,duration,gpus,team\n"
        "0,60,1,a\n"  # line 2: fine
        "0,abc,1,a\n"  # line 3: bad duration
        "yesterday,60,1,a\n"  # line 4: bad submit
        "0,60,0,a\n"  # line 5: no GPU
        "0,1:xx,1,a\n"  # line 6: bad duration
    )
    out = StringIO()
    call_command("replay_trace", str(trace), "--fleet", "1x8:H100", "--out", str(tmp_path),
                 stdout=out)  # fmt: skip
    text = out.getvalue()
    assert "bad_duration: 2 (lines 3, 6)" in text
    assert "bad_submit: 1 (lines 4)" in text and "no_gpu: 1 (lines 5)" in text
    document = json.loads((tmp_path / "replay.json").read_text())
    assert document["row_lines"] == {"bad_duration": [3, 6], "bad_submit": [4], "no_gpu": [5]}
    assert document["results"]["fairshare"]["finished"] == 1


def test_bad_inputs_are_command_errors(tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text("submit,duration,gpus,team\n0,abc,1,a\n")
    with pytest.raises(CommandError, match="no job"):
        call_command("replay_trace", str(trace), "--fleet", "1x8:H100", "--out", str(tmp_path))
    trace.write_text("submit,duration,gpus,team\n0,60,1,a\n")
    with pytest.raises(CommandError):
        call_command("replay_trace", str(trace), "--fleet", "eight GPUs", "--out", str(tmp_path))
    with pytest.raises(CommandError, match="Cannot"):
        call_command("replay_trace", str(tmp_path / "missing.csv"), "--fleet", "1x8:H100")
    trace.write_text("when,length\n0,60\n")
    with pytest.raises(CommandError, match="no column 'submit'"):
        call_command("replay_trace", str(trace), "--fleet", "1x8:H100", "--out", str(tmp_path))
    trace.write_bytes(b"\xff\xfe\x00garbage\x00\xff")
    with pytest.raises(CommandError):
        call_command("replay_trace", str(trace), "--fleet", "1x8:H100", "--out", str(tmp_path))


def test_iso_times_and_slurm_durations(tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text(
        "submit,duration,gpus,team\n"
        "2017-10-09 07:01:55,01:00:00,8,a\n"
        "2017-10-09T07:01:55Z,1-00:00:00,8,b\n"
        "2017-10-09T09:01:55+02:00,30:00,8,c\n"
    )
    from apps.jobs.scheduler.trace import load_generic

    jobs = load_generic(trace).jobs
    assert [j.submit for j in jobs] == [1507532515.0] * 3
    assert sorted(j.duration for j in jobs) == [1800.0, 3600.0, 86400.0]


SACCT = """JobID|Account|Submit|Start|End|Elapsed|AllocTRES|State
101|vision|2024-03-01T10:00:00|2024-03-01T10:05:00|2024-03-01T12:05:00|02:00:00|billing=16,cpu=16,gres/gpu=16,mem=256G,node=2|COMPLETED
101.batch|vision|2024-03-01T10:00:00|2024-03-01T10:05:00|2024-03-01T12:05:00|02:00:00|cpu=8,gres/gpu=8,mem=128G,node=1|COMPLETED
102|nlp|2024-03-01T10:30:00|2024-03-01T10:30:00|2024-03-02T11:30:00|1-01:00:00|cpu=4,gres/gpu:a100=2,mem=64G,node=1|FAILED
103|nlp|2024-03-01T11:00:00|Unknown|Unknown|00:00:00||PENDING
104|audio|2024-03-01T11:00:00|2024-03-01T11:00:00|2024-03-01T11:10:00|00:10:00|cpu=2,mem=8G,node=1|COMPLETED
105|audio|not a time|2024-03-01T11:00:00|2024-03-01T11:10:00|00:10:00|cpu=2,gres/gpu=1|COMPLETED
"""


def test_slurm_sacct_parsable2(tmp_path):
    trace = tmp_path / "sacct.txt"
    trace.write_text(SACCT)
    jobs_out = tmp_path / "jobs.csv"
    out = StringIO()
    call_command("replay_trace", str(trace), "--fleet", "4x8:a100", "--format", "slurm",
                 "--out", str(tmp_path), "--jobs-out", str(jobs_out), stdout=out)  # fmt: skip
    text = out.getvalue()
    assert "not_started: 1 (lines 5)" in text
    assert "no_gpu: 1 (lines 6)" in text and "bad_submit: 1 (lines 7)" in text
    rows = list(csv.DictReader(jobs_out.open()))
    assert [(r["team"], r["gpus"], float(r["duration"])) for r in rows] == [
        ("vision", "16", 7200.0),  # a two-node gang, its step skipped
        ("nlp", "2", 90000.0),  # typed gres, 1-01:00:00
    ]
    assert all(r["end"] and int(r["attempts"]) == 1 for r in rows)
    # the header alone is enough to recognise sacct output
    call_command("replay_trace", str(trace), "--fleet", "4x8:a100", "--out", str(tmp_path),
                 stdout=StringIO())  # fmt: skip
