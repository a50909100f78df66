"""Parsing of Slurm's output, and the test cluster's skip rule (no Slurm needed)."""

from datetime import UTC, datetime

import pytest

from apps.integrations.slurm.choices import SlurmJobState, job_state, pending_message
from apps.integrations.slurm.client import (
    SlurmClient,
    SlurmError,
    expand_hostlist,
    expand_indices,
    parse_exit_code,
    parse_time,
    parse_tres,
)
from tests.integrations.slurm import conftest


def test_hostlists_and_gpu_indices_expand_like_slurms():
    assert expand_hostlist("gpu[01-03,7],login") == ["gpu01", "gpu02", "gpu03", "gpu7", "login"]
    assert expand_hostlist("(null)") == []
    assert expand_indices("0-2,5") == [0, 1, 2, 5]


def test_exit_codes_times_and_tres():
    assert parse_exit_code("0:0") == 0
    assert parse_exit_code("3:0") == 3
    assert parse_exit_code("0:9") == 137  # killed by SIGKILL, as a shell reports it
    assert parse_time("1796298324") == datetime.fromtimestamp(1796298324, tz=UTC)
    assert parse_time("N/A") is None and parse_time("Unknown") is None
    assert parse_tres("billing=1,cpu=1,gres/gpu:h100=2,gres/gpu=2")["gres/gpu:h100"] == "2"


def test_states_and_reasons():
    assert job_state("CANCELLED by 0") == SlurmJobState.CANCELLED
    assert job_state("RUNNING") == SlurmJobState.RUNNING
    assert job_state("SOMETHING_NEW") == SlurmJobState.UNKNOWN
    assert pending_message("Resources").startswith("Waiting for GPUs")
    assert pending_message("SomeNewReason") == "Waiting in Slurm (SomeNewReason)."


def test_a_missing_command_is_a_clear_error(settings):
    client = SlurmClient(bin_dir="/nonexistent", conf="", cluster="", timeout=5)
    with pytest.raises(SlurmError) as error:
        client.ping()
    assert error.value.message == "scontrol was not found (SLURM_BIN_DIR=/nonexistent)."


def test_a_command_that_hangs_is_stopped_after_the_timeout(tmp_path):
    slow = tmp_path / "scontrol"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    client = SlurmClient(bin_dir=str(tmp_path), conf="", cluster="", timeout=0.5)
    with pytest.raises(SlurmError, match="did not answer within 0.5 s"):
        client.ping()


def test_missing_slurm_skips_but_fails_under_require_slurm(monkeypatch):
    monkeypatch.delenv("REQUIRE_SLURM", raising=False)
    with pytest.raises(pytest.skip.Exception):
        conftest._unavailable("Slurm is not installed")
    monkeypatch.setenv("REQUIRE_SLURM", "1")
    with pytest.raises(pytest.fail.Exception, match="REQUIRE_SLURM=1 but Slurm is not installed"):
        conftest._unavailable("Slurm is not installed")
