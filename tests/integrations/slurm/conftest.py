"""A real single-node Slurm (munged, slurmdbd on the local MariaDB, slurmctld, slurmd) for the
integration's tests, started once per test session under a temporary folder.

Without Slurm's binaries (Debian: `apt-get install slurm-wlm slurmdbd munge`) or MariaDB the
tests are skipped with the reason, except under REQUIRE_SLURM=1 (CI), where they fail.
"""

import os
import socket
import subprocess
import time
from types import SimpleNamespace

import pytest
from django.conf import settings as django_settings

from apps.integrations.slurm import services
from apps.teams.models import Quota
from portal import hooks
from tests.factories import MembershipFactory, TeamFactory, UserFactory, make_node_with_gpus
from tests.integrations.slurm.cluster import SlurmCluster, missing_binaries, which

GPU_MODEL = "H100-SXM-80GB"
GPU_TYPE = "h100"


def _unavailable(reason: str):
    if os.environ.get("REQUIRE_SLURM") == "1":
        pytest.fail(f"REQUIRE_SLURM=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def _mariadb_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 3306), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    missing = missing_binaries()
    if missing:
        _unavailable(
            f"Slurm is not installed (missing {', '.join(missing)}); "
            "apt-get install slurm-wlm slurmdbd munge"
        )
    if not _mariadb_reachable():
        _unavailable("MariaDB/MySQL is not reachable at 127.0.0.1:3306 (slurmdbd needs it)")
    cluster = SlurmCluster(root=tmp_path_factory.mktemp("slurm"), gpu_type=GPU_TYPE, gpu_count=8)
    try:
        cluster.start()
    except Exception as error:
        cluster.stop()
        _unavailable(f"the test Slurm cluster did not start: {error}")
    yield cluster
    cluster.stop()


def _clean_slurm(cluster: SlurmCluster) -> None:
    """Nothing of one test may hold GPUs or nodes in the next: cancel every job, drop every
    reservation, resume the node and wait until no job is left."""
    env = cluster.env
    subprocess.run([which("scancel"), "--full", "--user", cluster.user], env=env, timeout=30)
    out = subprocess.run(
        [which("scontrol"), "-o", "show", "reservation"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    for line in out.splitlines():
        for part in line.split():
            if part.startswith("ReservationName="):
                name = part.split("=", 1)[1]
                subprocess.run(
                    [which("scontrol"), "delete", f"ReservationName={name}"], env=env, timeout=30
                )
    # A test that drained the node (and failed before resuming it) must not starve the next.
    subprocess.run(
        [which("scontrol"), "update", f"NodeName={cluster.hostname}", "State=RESUME"],
        env=env,
        capture_output=True,
        timeout=30,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        queue = subprocess.run(
            [which("squeue"), "-h", "-t", "PD,R,CG,CF"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        if not queue.strip():
            return
        time.sleep(0.3)


@pytest.fixture
def slurm(slurm_cluster, settings, tmp_path, db):
    """The portal switched to the Slurm backend against the test cluster: the node (this
    machine's hostname) with 8 H100 in the fleet, team `vision` (quota 4 guaranteed / 8 limit)
    with member alice, and its Slurm account synced."""
    _clean_slurm(slurm_cluster)
    settings.JOB_BACKEND = "slurm"
    settings.SLURM_ENABLED = True
    settings.SLURM_CONF = str(slurm_cluster.conf)
    settings.SLURM_BIN_DIR = os.path.dirname(which("sbatch"))
    settings.SLURM_CLUSTER = slurm_cluster.cluster_name
    settings.SLURM_GPU_TYPES = {GPU_MODEL: GPU_TYPE}
    settings.SLURM_PARTITIONS = {}
    settings.SLURM_OUTPUT_DIR = str(tmp_path / "output")
    settings.SLURM_SUBMIT_USER = slurm_cluster.user
    settings.PORTAL_HOOKS = {
        event: [*django_settings.PORTAL_HOOKS.get(event, []), path]
        for event, path in django_settings.SLURM_HOOKS.items()
    }
    hooks.reset_cache()
    services._cluster_name.cache_clear()
    node = make_node_with_gpus(slurm_cluster.hostname, 8, model_name=GPU_MODEL)
    team = TeamFactory(slug="vision")
    member = MembershipFactory(team=team, user=UserFactory(username="alice")).user
    model = node.gpus.first().model
    Quota.objects.create(team=team, gpu_model=model, guaranteed=4, limit=8)
    services.quota_sync_team(team=team)
    yield SimpleNamespace(
        cluster=slurm_cluster, node=node, team=team, member=member, model=model, settings=settings
    )
    _clean_slurm(slurm_cluster)
    hooks.reset_cache()  # the settings fixture then restores PORTAL_HOOKS


def wait_for(predicate, *, timeout: float = 30, interval: float = 0.5, what: str = "condition"):
    """Call predicate() until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def slurm_out(cluster: SlurmCluster, *argv: str) -> str:
    result = subprocess.run(
        [which(argv[0]), *argv[1:]], env=cluster.env, capture_output=True, text=True, timeout=30
    )
    return result.stdout + result.stderr
