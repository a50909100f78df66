"""Real processes for end-to-end tests: simulated node agents, and waiting on what they do.

Agents run as `python -m workers.agent` with no database settings at all (nodes hold no
credentials), on the test's Redis broker."""

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import redis
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def agent_environment(**extra: str) -> dict[str, str]:
    """The test process's environment without any database or Django settings, on the test
    broker."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE", "TEST_DATABASE", "DJANGO_"))
    }
    env["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL
    env.update(extra)
    return env


def spawn_agent(
    hostname: str,
    *,
    gpus: int = 4,
    profile: str = "idle",
    job_dir: Path | None = None,
    power_dir: Path | None = None,
    stderr=subprocess.DEVNULL,
) -> subprocess.Popen:
    """A simulated node agent serving `node.<hostname>` (its power switch under `power_dir`)."""
    extra = {"AGENT_JOB_DIR": str(job_dir)} if job_dir else {}
    if power_dir:
        extra["AGENT_POWER_DIR"] = str(power_dir)
    env = agent_environment(**extra)
    command = [sys.executable, "-m", "workers.agent", "--backend", "simulated"]
    command += ["--hostname", hostname, "--gpus", str(gpus), "--profile", profile]
    command += ["--loglevel", "WARNING"]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=stderr is subprocess.PIPE or None,
    )


def portal_environment(**extra: str) -> dict[str, str]:
    """Environment for a portal process (a worker, a drain loop) on the test database and
    broker: the database pytest-django created, reached as a DATABASE_URL."""
    db = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DJANGO_DEBUG": "1",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "REDIS_URL": settings.CELERY_BROKER_URL,
    }
    env.update(extra)
    return env


def wait_for(condition, *, timeout: float = 60, poll=None, every: float = 0.3) -> bool:
    """Call `poll` (if any) then `condition` until it is true or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if poll:
            poll()
        if condition():
            return True
        time.sleep(every)
    return False


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it does not exit within 20 s."""
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def free_port() -> int:
    """A TCP port nothing listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def redis_server(directory: Path):
    """A Redis server of the test's own on a free port, so a test can pause (SIGSTOP) or kill
    it without touching the shared one. Yields (process, url)."""
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        + ["--appendonly", "no", "--dir", str(directory)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_timeout=1)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    try:
        assert wait_for(answers, timeout=20, every=0.1), "redis-server did not start"
        yield process, url
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)  # a paused server cannot handle SIGTERM
            stop(process)


@contextmanager
def redfish_emulator(
    directory: Path,
    systems: list[dict],
    *,
    users: dict[str, str] | None = None,
    settings: dict | None = None,
    certificate: tuple[Path, Path] | None = None,
):
    """A Redfish BMC: sushy-tools' `sushy-emulator` with its fake systems driver (power changes
    land 1-11 s after they are asked, as on hardware) on a free port. `systems` are the fake
    driver's entries (`uuid`, `name`, `power_state`); `users` (name -> password) turn on HTTP
    Basic authentication; `certificate` (cert, key) serves HTTPS. Yields its base URL."""
    import bcrypt  # installed with sushy-tools

    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "SUSHY_EMULATOR_STATE_DIR": str(directory / "state"),
        "SUSHY_EMULATOR_FAKE_SYSTEMS": [{"nics": [], **system} for system in systems],
        **(settings or {}),
    }
    if users:
        auth_file = directory / "htpasswd"
        auth_file.write_text(
            "".join(
                f"{name}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()}\n"
                for name, password in users.items()
            )
        )
        config["SUSHY_EMULATOR_AUTH_FILE"] = str(auth_file)
    config_file = directory / "emulator.conf"
    config_file.write_text("".join(f"{key} = {value!r}\n" for key, value in config.items()))
    port = free_port()
    command = [sys.executable, "-m", "sushy_tools.emulator.main", "--fake"]
    command += ["--config", str(config_file), "--interface", "127.0.0.1", "--port", str(port)]
    if certificate:
        command += ["--ssl-certificate", str(certificate[0]), "--ssl-key", str(certificate[1])]
    log = open(directory / "emulator.log", "ab")  # noqa: SIM115 - lives with the process
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def listening() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    scheme = "https" if certificate else "http"
    try:
        if not wait_for(lambda: process.poll() is not None or listening(), timeout=30):
            raise RuntimeError("sushy-emulator did not start listening within 30 s")
        if process.poll() is not None:
            raise RuntimeError(
                "sushy-emulator exited: " + (directory / "emulator.log").read_text()[-2000:]
            )
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            stop(process)
        log.close()
