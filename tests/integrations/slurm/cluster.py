"""A throwaway single-node Slurm cluster for the integration tests.

Starts munged, slurmdbd (on the local MariaDB, its own database), slurmctld and slurmd from
configuration generated under a temporary folder, on free ports, with fake GPUs: gres.conf
points `File=` at plain files, which is enough for Slurm to count and allocate them. The
node is this machine's hostname; processes run as the current user.
"""

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = (
    "munged",
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "sbatch",
    "squeue",
    "sacct",
    "sacctmgr",
    "scontrol",
    "scancel",
    "sinfo",
)
SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/sbin")
# Slurm 22.05 turns power saving (and `State=POWER_DOWN`) off when SuspendTime is INFINITE; a
# year keeps it on while Slurm never suspends an idle node by itself.
NEVER_SUSPEND_SECONDS = 365 * 24 * 3600


def which(name: str) -> str | None:
    path = shutil.which(name)
    if path:
        return path
    for folder in SBIN_DIRS:
        candidate = Path(folder) / name
        if candidate.exists() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def missing_binaries() -> list[str]:
    return [name for name in BINARIES if which(name) is None]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(predicate, *, timeout: float, what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    tails = []
    for log in logs:
        if log.exists():
            tails.append(f"--- {log.name} ---\n" + log.read_text(errors="replace")[-3000:])
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s.\n" + "\n".join(tails))


@dataclass
class SlurmCluster:
    """Configuration of one test cluster; `start()` brings it up, `stop()` tears it down."""

    root: Path
    gpu_type: str = "h100"
    gpu_count: int = 8
    # Slurm's power saving: nothing is suspended by itself, only on request
    # (`scontrol update State=POWER_DOWN`); "powering" stops and starts the node's slurmd.
    suspend_timeout: int = 5
    resume_timeout: int = 60
    cluster_name: str = "portaltest"
    partition: str = "gpu"
    mysql_host: str = "127.0.0.1"
    mysql_port: int = 3306
    mysql_user: str = "root"
    hostname: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.user = getpass.getuser()
        self.ctld_port = free_port()
        self.slurmd_port = free_port()
        self.dbd_port = free_port()
        self.database = f"slurm_acct_{uuid.uuid4().hex[:10]}"

    # --- paths ----------------------------------------------------------------------------

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    def power_script(self, name: str) -> Path:
        return self.root / "etc" / f"{name}.sh"

    @property
    def power_log(self) -> Path:
        """Each line: `suspend|resume <hostlist>`, as Slurm ran its power-saving programs."""
        return self.root / "log" / "power.log"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm's commands: our slurm.conf; times read and shown in UTC."""
        return {**os.environ, "SLURM_CONF": str(self.conf), "TZ": "UTC"}

    # --- configuration --------------------------------------------------------------------

    def write_config(self) -> None:
        for sub in ("etc", "munge", "state", "spool", "log", "run", "dev", "jobs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # munged wants its socket folder searchable by the users whose commands talk to it.
        os.chmod(self.root / "munge", 0o755)  # noqa: S103
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        for index in range(self.gpu_count):
            (self.root / "dev" / f"gpu{index}").touch()
        log, run, state = self.root / "log", self.root / "run", self.root / "state"
        gpu_gres = f"gpu:{self.gpu_type}:{self.gpu_count}"
        self._write_power_scripts()
        cpus = max(os.cpu_count() or 1, 1)
        self.conf.write_text(
            f"""ClusterName={self.cluster_name}
SlurmctldHost={self.hostname}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser={self.user}
SlurmdUser={self.user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={state}
SlurmdSpoolDir={self.root / "spool"}
SlurmctldPidFile={run / "slurmctld.pid"}
SlurmdPidFile={run / "slurmd.pid"}
SlurmctldLogFile={log / "slurmctld.log"}
SlurmdLogFile={log / "slurmd.log"}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=2
Waittime=0
MessageTimeout=10
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={self.dbd_port}
AccountingStoragePass={self.munge_socket}
AccountingStorageTRES=gres/gpu,gres/gpu:{self.gpu_type}
AccountingStorageEnforce=associations,limits,qos,safe
JobCompType=jobcomp/none
PriorityType=priority/multifactor
PriorityWeightFairshare=1000
SuspendProgram={self.power_script("suspend")}
ResumeProgram={self.power_script("resume")}
SuspendTime={NEVER_SUSPEND_SECONDS}
SuspendTimeout={self.suspend_timeout}
ResumeTimeout={self.resume_timeout}
NodeName={self.hostname} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 Gres={gpu_gres} \
State=UNKNOWN
PartitionName={self.partition} Nodes={self.hostname} Default=YES MaxTime=INFINITE State=UP
"""
        )
        (self.root / "etc" / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName={self.hostname} Name=gpu Type={self.gpu_type} "
            f"File={self.root / 'dev'}/gpu[0-{self.gpu_count - 1}]\n"
        )
        dbd = self.root / "etc" / "slurmdbd.conf"
        dbd.write_text(
            f"""AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.dbd_port}
SlurmUser={self.user}
LogFile={log / "slurmdbd.log"}
PidFile={run / "slurmdbd.pid"}
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost={self.mysql_host}
StoragePort={self.mysql_port}
StorageUser={self.mysql_user}
StorageLoc={self.database}
"""
        )
        os.chmod(dbd, 0o600)

    def _write_power_scripts(self) -> None:
        """Slurm's SuspendProgram and ResumeProgram for the one node: "power off" stops its
        slurmd, "power on" starts it again, so Slurm sees the node go away and register anew.
        Slurm takes a powered-up node back only once it has booted after the request; the
        restarted slurmd gets a fresh boot time from a time namespace whose boot clock starts
        now (`unshare --time`), as after a real power-on. Both log their arguments to
        `power_log`."""
        slurmd_pid = self.root / "run" / "slurmd.pid"
        log = f'echo "$(basename "$0" .sh) $*" >> "{self.power_log}"\n'
        suspend = self.power_script("suspend")
        # Power off is a power cut: slurmd gets no chance to say goodbye.
        suspend.write_text(
            f'#!/bin/sh\n{log}kill -KILL "$(cat "{slurmd_pid}")" 2>/dev/null\nexit 0\n'
        )
        resume = self.power_script("resume")
        resume.write_text(
            f"#!/bin/sh\n{log}"
            "(sleep 2\n"  # the node boots: its boot time must come after the request
            ' up=$(cut -d" " -f1 /proc/uptime)\n'
            f' exec setsid unshare --time --boottime $((0 - ${{up%%.*}})) "{which("slurmd")}" '
            f'-D -N {self.hostname} -f "{self.conf}" '
            f'>> "{self.root / "log" / "slurmd.out"}" 2>&1 < /dev/null) &\n'
        )
        for script in (suspend, resume):
            os.chmod(script, 0o755)  # noqa: S103 - slurmctld runs it

    # --- processes ------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 - lives with the process
        self.processes[name] = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )

    def _command_ok(self, argv: list[str]) -> bool:
        try:
            result = subprocess.run(argv, env=self.env, capture_output=True, timeout=10)
        except subprocess.TimeoutExpired:
            return False
        return result.returncode == 0

    def _logs(self) -> list[Path]:
        return sorted((self.root / "log").glob("*"))

    def start(self, *, timeout: float = 60) -> "SlurmCluster":
        self.write_config()
        munge = self.root / "munge"
        self._spawn(
            "munged",
            [
                which("munged"),
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={munge / 'munge.key'}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--seed-file={munge / 'munged.seed'}",
            ],
        )
        _wait(self.munge_socket.exists, timeout=timeout, what="munged", logs=self._logs())
        # slurmdbd reads slurmdbd.conf beside $SLURM_CONF (it has no option to name it).
        self._spawn("slurmdbd", [which("slurmdbd"), "-D"])
        _wait(
            lambda: self._port_open(self.dbd_port),
            timeout=timeout,
            what="slurmdbd",
            logs=self._logs(),
        )
        # The cluster must be known to the accounting database before slurmctld registers.
        self.sacctmgr("add", "cluster", self.cluster_name)
        self._spawn("slurmctld", [which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        _wait(
            lambda: self._command_ok([which("scontrol"), "ping"]),
            timeout=timeout,
            what="slurmctld",
            logs=self._logs(),
        )
        self._spawn("slurmd", [which("slurmd"), "-D", "-N", self.hostname, "-f", str(self.conf)])
        _wait(self._node_idle, timeout=timeout, what="slurmd", logs=self._logs())
        return self

    def _port_open(self, port: int) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    def _node_idle(self) -> bool:
        result = subprocess.run(
            [which("sinfo"), "-h", "-N", "-o", "%T"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return result.returncode == 0 and result.stdout.strip().rstrip("*") in ("idle", "mixed")

    def sacctmgr(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(
            [which("sacctmgr"), "-i", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if check and result.returncode != 0 and "Nothing new added" not in result.stdout:
            raise RuntimeError(f"sacctmgr {' '.join(args)} failed: {result.stdout}{result.stderr}")
        return result.stdout

    def stop(self) -> None:
        self._kill_resumed_slurmd()
        for name in ("slurmd", "slurmctld", "slurmdbd", "munged"):
            process = self.processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        self._drop_database()

    def _kill_resumed_slurmd(self) -> None:
        """A slurmd that the ResumeProgram started is no child of ours: found by its pid file
        (and its command line, so a reused pid is left alone)."""
        tracked = self.processes.get("slurmd")
        try:
            pid = int((self.root / "run" / "slurmd.pid").read_text().strip())
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return
        if (tracked is None or pid != tracked.pid) and str(self.conf).encode() in command:
            os.kill(pid, signal.SIGKILL)

    def _drop_database(self) -> None:
        client = which("mariadb") or which("mysql")
        if client is None:
            return
        subprocess.run(
            [
                client,
                f"-h{self.mysql_host}",
                f"-P{self.mysql_port}",
                f"-u{self.mysql_user}",
                "-e",
                f"DROP DATABASE IF EXISTS {self.database}",
            ],
            capture_output=True,
            timeout=30,
        )
