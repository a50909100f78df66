"""Slurm's command-line tools, called as subprocesses with timeouts and readable errors.

Nothing here touches the database: each method runs one command and parses its output. Times
cross the boundary as epoch seconds (`SLURM_TIME_FORMAT=%s` for output, `TZ=UTC` for the times
we format), so the portal and the cluster never disagree about a time zone.
"""

import os
import re
import shlex
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings

# The comment of every job the portal submits starts with this (followed by the job's id).
PORTAL_COMMENT = "portal job "
# Slurm prints these for a time that is not known (yet).
UNKNOWN_TIMES = {"", "N/A", "Unknown", "None", "0"}


class SlurmError(Exception):
    """A Slurm command failed, timed out or could not be found; `str()` says which and why."""

    def __init__(
        self, message: str, *, command: Sequence[str] = (), output: str = "", reason: str = ""
    ) -> None:
        super().__init__(message)
        self.message = message
        self.command = list(command)
        self.output = output
        self.reason = reason or message  # Slurm's own words, without the command's name


@dataclass(frozen=True)
class QueueEntry:
    """A job as `squeue` shows it (pending, running or just finishing)."""

    job_id: int
    state: str
    reason: str
    nodes: str
    start: datetime | None


@dataclass(frozen=True)
class AccountingRecord:
    """One job's allocation line from `sacct -X`."""

    job_id: int
    cluster: str
    account: str
    user: str
    name: str
    state: str
    exit_code: int | None
    submit: datetime | None
    start: datetime | None
    end: datetime | None
    nodes: str
    alloc_tres: dict[str, str] = field(default_factory=dict)

    def gpus(self, gpu_type: str | None = None) -> int:
        """GPUs the job held, from AllocTRES (`gres/gpu:<type>=N`, else `gres/gpu=N`)."""
        if gpu_type and f"gres/gpu:{gpu_type}" in self.alloc_tres:
            return int(self.alloc_tres[f"gres/gpu:{gpu_type}"])
        return int(self.alloc_tres.get("gres/gpu", 0) or 0)

    @property
    def gpu_types(self) -> dict[str, int]:
        """GPUs per type, e.g. {"h100": 2}."""
        return {
            key.split(":", 1)[1]: int(value)
            for key, value in self.alloc_tres.items()
            if key.startswith("gres/gpu:") and value.isdigit()
        }


def parse_time(value: str) -> datetime | None:
    value = value.strip()
    if value in UNKNOWN_TIMES or not value.lstrip("-").isdigit():
        return None
    return datetime.fromtimestamp(int(value), tz=UTC)


def format_time(moment: datetime) -> str:
    """A time as Slurm reads it (no zone: the commands run with TZ=UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def parse_tres(text: str) -> dict[str, str]:
    """`billing=1,cpu=1,gres/gpu:h100=2,node=1` -> {"cpu": "1", "gres/gpu:h100": "2", ...}."""
    result = {}
    for part in text.split(","):
        if "=" in part:
            key, value = part.split("=", 1)
            result[key.strip()] = value.strip()
    return result


def parse_exit_code(text: str) -> int | None:
    """sacct's `ExitCode` is `code:signal`; a signal counts as 128 + signal, as shells do."""
    if not text or ":" not in text:
        return None
    code, signal = text.split(":", 1)
    try:
        code_i, signal_i = int(code), int(signal)
    except ValueError:
        return None
    return 128 + signal_i if signal_i else code_i


_IDX = re.compile(r"Nodes=(?P<nodes>\S+).*?GRES=(?P<gres>\S*)")


def expand_hostlist(text: str) -> list[str]:
    """`node[1-3,5],gpu7` -> [node1, node2, node3, node5, gpu7] (Slurm's compact host lists)."""
    hosts: list[str] = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", text):
        prefix, ranges = match.group(1), match.group(2)
        if not ranges:
            if prefix and prefix not in ("(null)", "None"):
                hosts.append(prefix)
            continue
        for part in ranges.split(","):
            if "-" in part:
                low, high = part.split("-", 1)
                hosts.extend(f"{prefix}{n:0{len(low)}d}" for n in range(int(low), int(high) + 1))
            else:
                hosts.append(f"{prefix}{part}")
    return hosts


def expand_indices(text: str) -> list[int]:
    """`0-1,4` -> [0, 1, 4]."""
    result: list[int] = []
    for part in text.split(","):
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            result.extend(range(int(low), int(high) + 1))
        else:
            result.append(int(part))
    return result


class SlurmClient:
    """Runs Slurm's commands against one cluster (settings `SLURM_*`)."""

    def __init__(
        self,
        *,
        bin_dir: str | None = None,
        conf: str | None = None,
        cluster: str | None = None,
        timeout: float | None = None,
    ) -> None:
        self.bin_dir = settings.SLURM_BIN_DIR if bin_dir is None else bin_dir
        self.conf = settings.SLURM_CONF if conf is None else conf
        self.cluster = settings.SLURM_CLUSTER if cluster is None else cluster
        self.timeout = settings.SLURM_COMMAND_TIMEOUT if timeout is None else timeout

    # --- running commands -------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "TZ": "UTC", "SLURM_TIME_FORMAT": "%s"}
        if self.conf:
            env["SLURM_CONF"] = self.conf
        return env

    def _program(self, name: str) -> str:
        return os.path.join(self.bin_dir, name) if self.bin_dir else name

    def run(self, name: str, *args: str, stdin: str | None = None, check: bool = True) -> str:
        """Run one command; its stdout, or SlurmError naming the command and Slurm's words."""
        argv = [self._program(name), *args]
        try:
            result = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env=self._env(),
            )
        except FileNotFoundError as error:
            raise SlurmError(
                f"{name} was not found (SLURM_BIN_DIR={self.bin_dir or 'PATH'}).", command=argv
            ) from error
        except subprocess.TimeoutExpired as error:
            raise SlurmError(
                f"{name} did not answer within {self.timeout:g} s; is slurmctld reachable?",
                command=argv,
            ) from error
        if check and result.returncode != 0:
            words = (result.stderr.strip() or result.stdout.strip() or "no message").splitlines()
            detail = " ".join(line.removeprefix(f"{name}: ").strip() for line in words[-3:])
            raise SlurmError(
                f"{name} failed: {detail}",
                command=argv,
                output=result.stdout + result.stderr,
                reason=detail,
            )
        return result.stdout

    # --- jobs -------------------------------------------------------------------------------

    def submit(
        self,
        *,
        argv: Sequence[str],
        env: dict[str, str],
        account: str,
        gres: str = "",
        gpus: str = "",
        nodes: int | None,
        time_minutes: int,
        job_name: str,
        output: str,
        workdir: str = "",
        partition: str = "",
        reservation: str = "",
        comment: str = "",
    ) -> int:
        """`sbatch` a batch script that runs `argv` (never through a shell string) with `env`;
        `gres` is per node (`gpu:h100:4`), `gpus` per job (`h100:16`). Returns Slurm's id."""
        lines = ["#!/bin/sh"]
        lines += [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())]
        lines.append(f"exec {shlex.join(argv)}")
        options = [
            "--parsable",
            f"--account={account}",
            f"--time={max(time_minutes, 1)}",
            f"--job-name={job_name}",
            f"--output={output}",
            "--export=ALL",
        ]
        if gres:
            options.append(f"--gres={gres}")
        if gpus:
            options.append(f"--gpus={gpus}")
        if nodes:
            options.append(f"--nodes={nodes}")
        if workdir:
            options.append(f"--chdir={workdir}")
        if partition:
            options.append(f"--partition={partition}")
        if reservation:
            options.append(f"--reservation={reservation}")
        if comment:
            options.append(f"--comment={comment}")
        out = self.run("sbatch", *options, stdin="\n".join(lines) + "\n").strip()
        # --parsable prints "<id>" or "<id>;<cluster>".
        try:
            return int(out.split(";", 1)[0])
        except ValueError as error:
            raise SlurmError(f"sbatch answered {out!r} instead of a job id.") from error

    def queue(self, job_ids: Iterable[int]) -> dict[int, QueueEntry]:
        """squeue's view of these jobs; finished ones are simply absent."""
        ids = ",".join(str(i) for i in job_ids)
        if not ids:
            return {}
        out = self.run(
            "squeue", "-h", "--states=all", f"--jobs={ids}", "-o", "%i|%T|%r|%N|%S", check=False
        )
        entries = {}
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) != 5 or not parts[0].isdigit():
                continue
            entries[int(parts[0])] = QueueEntry(
                job_id=int(parts[0]),
                state=parts[1],
                reason=parts[2],
                nodes=parts[3],
                start=parse_time(parts[4]),
            )
        return entries

    def portal_jobs(self) -> dict[int, tuple[str, datetime | None]]:
        """Pending and running jobs whose comment marks them as the portal's: id -> (comment,
        submit time)."""
        out = self.run("squeue", "-h", "-o", "%i|%V|%k", check=False)  # not finished ones
        jobs = {}
        for line in out.splitlines():
            job_id, _, rest = line.strip().partition("|")
            submitted, _, comment = rest.partition("|")
            if job_id.isdigit() and comment.startswith(PORTAL_COMMENT):
                jobs[int(job_id)] = (comment, parse_time(submitted))
        return jobs

    def expected_starts(self, job_ids: Iterable[int]) -> dict[int, datetime]:
        """`squeue --start`: when Slurm's backfill expects each pending job to start."""
        ids = ",".join(str(i) for i in job_ids)
        if not ids:
            return {}
        out = self.run("squeue", "-h", "--start", f"--jobs={ids}", "-o", "%i|%S", check=False)
        starts = {}
        for line in out.splitlines():
            job_id, _, start = line.strip().partition("|")
            moment = parse_time(start)
            if job_id.isdigit() and moment is not None:
                starts[int(job_id)] = moment
        return starts

    def gpu_indices(self, job_id: int) -> dict[str, list[int]]:
        """GPU indices the running job holds on each node (`scontrol -d show job`)."""
        out = self.run("scontrol", "-d", "-o", "show", "job", str(job_id), check=False)
        result: dict[str, list[int]] = {}
        for match in re.finditer(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)", out):
            indices: list[int] = []
            for idx in re.findall(r"\(IDX:([0-9,\-]+)\)", match.group(2)):
                indices.extend(expand_indices(idx))
            for host in expand_hostlist(match.group(1)):
                result.setdefault(host, []).extend(indices)
        return result

    def accounting(
        self,
        *,
        job_ids: Iterable[int] | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        all_users: bool = True,
    ) -> list[AccountingRecord]:
        """`sacct -X` allocation records: for some job ids, or every job that ran in [start,
        end) (including jobs submitted to Slurm directly)."""
        args = ["-n", "-P", "-X"]
        args.append(
            "--format=JobID,Cluster,Account,User,JobName%200,State,ExitCode,Submit,Start,End,"
            "NodeList,AllocTRES"
        )
        if all_users:
            args.append("--allusers")
        if self.cluster:
            args.append(f"--clusters={self.cluster}")
        if job_ids is not None:
            ids = ",".join(str(i) for i in job_ids)
            if not ids:
                return []
            args.append(f"--jobs={ids}")
        if start is not None:
            args.append(f"--starttime={format_time(start)}")
        if end is not None:
            args.append(f"--endtime={format_time(end)}")
        records = []
        for line in self.run("sacct", *args).splitlines():
            parts = line.split("|")
            if len(parts) != 12 or not parts[0].isdigit():
                continue  # array and het job parts ("123_4", "123+1") are not imported
            records.append(
                AccountingRecord(
                    job_id=int(parts[0]),
                    cluster=parts[1],
                    account=parts[2],
                    user=parts[3],
                    name=parts[4],
                    state=parts[5].split()[0] if parts[5] else "",
                    exit_code=parse_exit_code(parts[6]),
                    submit=parse_time(parts[7]),
                    start=parse_time(parts[8]),
                    end=parse_time(parts[9]),
                    nodes=parts[10],
                    alloc_tres=parse_tres(parts[11]),
                )
            )
        return records

    def cancel(self, job_id: int) -> None:
        """`scancel`; a job Slurm no longer knows or that already ended is not an error."""
        try:
            self.run("scancel", str(job_id))
        except SlurmError as error:
            if "Invalid job id" in error.message or "already completing" in error.message:
                return
            raise

    # --- reservations -----------------------------------------------------------------------

    def reservation_create(
        self, *, name: str, start: datetime | None, end: datetime, nodes: list[str], accounts
    ) -> None:
        """`scontrol create reservation` on whole nodes for the accounts; raises SlurmError
        with Slurm's reason (nodes busy, unknown account, ...)."""
        self.run(
            "scontrol",
            "create",
            "reservation",
            f"ReservationName={name}",
            f"StartTime={format_time(start) if start else 'now'}",
            f"EndTime={format_time(end)}",
            f"Nodes={','.join(nodes)}",
            f"Accounts={','.join(accounts)}",
        )

    def reservation_update(self, *, name: str, end: datetime) -> None:
        self.run("scontrol", "update", f"ReservationName={name}", f"EndTime={format_time(end)}")

    def reservation_delete(self, name: str) -> None:
        """Delete a reservation; one Slurm already removed (it ended) is not an error."""
        try:
            self.run("scontrol", "delete", f"ReservationName={name}")
        except SlurmError as error:
            if "invalid" in error.message.lower():
                return
            raise

    def reservations(self) -> dict[str, dict[str, str]]:
        """Every reservation Slurm holds: name -> its fields (`scontrol show res -o`)."""
        out = self.run("scontrol", "-o", "show", "reservation", check=False)
        result = {}
        for line in out.splitlines():
            fields = dict(
                part.split("=", 1) for part in line.split() if "=" in part and part[0].isupper()
            )
            if "ReservationName" in fields:
                result[fields["ReservationName"]] = fields
        return result

    # --- accounts and limits ----------------------------------------------------------------

    def sacctmgr(self, *args: str) -> str:
        return self.run("sacctmgr", "-i", *args)

    def account_limits(self, account: str) -> dict[str, str] | None:
        """The account's own association (no user): {"grptres": ..., "fairshare": ...,
        "parent": ...}, or None if Slurm does not know the account."""
        args = ["-n", "-P", "show", "association", "where", f"account={account}"]
        if self.cluster:
            args.append(f"cluster={self.cluster}")
        out = self.run("sacctmgr", *args, "format=account,user,grptres,fairshare,parentname")
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) == 5 and parts[0] == account and not parts[1]:
                return {"grptres": parts[2], "fairshare": parts[3], "parent": parts[4]}
        return None

    def account_users(self, account: str) -> set[str]:
        args = ["-n", "-P", "show", "association", "where", f"account={account}"]
        if self.cluster:
            args.append(f"cluster={self.cluster}")
        out = self.run("sacctmgr", *args, "format=account,user")
        return {
            line.split("|")[1]
            for line in out.splitlines()
            if line.count("|") == 1 and line.split("|")[1]
        }

    # --- nodes ------------------------------------------------------------------------------

    def node_states(self) -> dict[str, tuple[str, str]]:
        """`sinfo -N`: node -> (state, reason)."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N|%T|%E")
        result = {}
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) == 3:
                result[parts[0]] = (parts[1], "" if parts[2] == "none" else parts[2])
        return result

    def node_update(self, name: str, *, state: str, reason: str = "") -> None:
        """`scontrol update NodeName=... State=DRAIN|RESUME [Reason=...]`."""
        args = ["update", f"NodeName={name}", f"State={state}"]
        if reason:
            args.append(f"Reason={reason}")
        self.run("scontrol", *args)

    def ping(self) -> str:
        return self.run("scontrol", "ping").strip()
