"""Submitting a job: what is admitted to the queue, and the refusals that name the fix."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count

from apps.fleet.choices import GpuStatus
from apps.fleet.models import Gpu, GpuModel
from apps.jobs import messaging
from apps.jobs.choices import JobPriorityClass
from apps.jobs.models import Job
from apps.reservations.choices import OPEN_STATUSES as RESERVATION_OPEN_STATUSES
from apps.reservations.models import Reservation
from apps.teams.models import Membership, Team
from apps.teams.selectors import team_quota_rule
from portal import hooks
from portal.exceptions import PolicyRefusal
from portal.formatting import format_count

MAX_ARGS = 1000
MAX_ARG_LENGTH = 4096
MAX_ENV = 200
MAX_ENV_VALUE = 8192


def _validate_argv(argv) -> list[str]:
    if isinstance(argv, str) or not isinstance(argv, list):
        raise ValidationError({"argv": "Give the command as a list of arguments, not a string."})
    if not argv:
        raise ValidationError({"argv": "The command must have at least one argument."})
    if len(argv) > MAX_ARGS:
        raise ValidationError({"argv": f"At most {MAX_ARGS} arguments."})
    for arg in argv:
        if not isinstance(arg, str):
            raise ValidationError({"argv": "Every argument must be a string."})
        if len(arg) > MAX_ARG_LENGTH or "\x00" in arg:
            raise ValidationError({"argv": "An argument is too long or contains a NUL byte."})
    if not argv[0].strip():
        raise ValidationError({"argv": "The program (first argument) must not be empty."})
    return argv


def _validate_env(env) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise ValidationError({"env": "Give the environment as NAME: value pairs."})
    if len(env) > MAX_ENV:
        raise ValidationError({"env": f"At most {MAX_ENV} variables."})
    for name, value in env.items():
        if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
            raise ValidationError({"env": f"{name!r} is not a valid variable name."})
        if name.startswith("CUDA_VISIBLE_DEVICES"):
            raise ValidationError({"env": "CUDA_VISIBLE_DEVICES is set by the portal."})
        if not isinstance(value, str) or len(value) > MAX_ENV_VALUE or "\x00" in value:
            raise ValidationError({"env": f"The value of {name} must be a short string."})
    return env


def fleet_size(gpu_model: GpuModel | None) -> tuple[int, int]:
    """(GPUs of the model in the fleet, GPUs of it on the largest node), counting whole GPUs
    that are not retired. For any model (None): the largest of those over all models, since
    a job's GPUs are all of one model."""
    gpus = Gpu.objects.filter(mig_parent__isnull=True).exclude(status=GpuStatus.RETIRED)
    if gpu_model is not None:
        gpus = gpus.filter(model=gpu_model)
    rows = gpus.values("node_id", "model_id").annotate(n=Count("id")).order_by()
    per_model: dict[int, int] = {}
    largest = 0
    for row in rows:
        per_model[row["model_id"]] = per_model.get(row["model_id"], 0) + row["n"]
        largest = max(largest, row["n"])
    return max(per_model.values(), default=0), largest


def _require_within_guarantee(team: Team, gpu_model: GpuModel | None, gpu_count: int) -> None:
    """Refuse (400 on priority_class) a Guaranteed job larger than the team's guarantee: the
    class runs only within the guarantee, so such a job would wait for ever. The message
    names the fix."""
    rule = team_quota_rule(team=team)
    models = (
        [gpu_model.name]
        if gpu_model is not None
        else list(GpuModel.objects.order_by("name").values_list("name", flat=True))
    )
    ceiling = max((rule.guarantee_ceiling(team.slug, model) for model in models), default=0)
    if gpu_count <= ceiling:
        return
    noun = f"{gpu_model.name} GPU" if gpu_model is not None else "GPU"
    over_quota = JobPriorityClass.OVER_QUOTA.label.split(" (", 1)[0]
    if ceiling == 0:
        message = (
            f"Team {team.slug} has no guaranteed {noun}s, so its jobs cannot run as Guaranteed. "
            f"Choose {over_quota}: the job then runs on spare GPUs within the team's limit and "
            "may be preempted."
        )
    else:
        message = (
            f"Team {team.slug} is guaranteed {format_count(ceiling, noun)}"
            f"{'' if gpu_model is not None else ' of one model'}, so a {gpu_count}-GPU job "
            f"cannot run as Guaranteed. Choose {over_quota} to run it on spare GPUs within the "
            "team's limit (it may be preempted), or ask for at most "
            f"{format_count(ceiling, 'GPU')}."
        )
    raise ValidationError({"priority_class": message})


def job_submit(
    *,
    actor,
    team: Team,
    argv,
    gpu_count: int,
    max_runtime_seconds: int,
    gpu_model: GpuModel | None = None,
    name: str = "",
    workdir: str = "",
    env=None,
    same_node: bool = True,
    priority_class: str = JobPriorityClass.OVER_QUOTA,
    reservation: Reservation | None = None,
    checkpointable: bool = False,
) -> Job:
    """Queue a job for the team. Members of the team may submit. Refuses (400, per field) an
    empty or string argv, bad env names, more GPUs than one node has (same_node) or than the
    fleet has, a runtime above JOBS_MAX_RUNTIME_SECONDS, a reservation of another team or
    smaller than the job, and a Guaranteed job larger than the team's guarantee."""
    if not Membership.objects.filter(user=actor, team=team).exists():
        raise PolicyRefusal("Only members of the team may submit its jobs.", code="not_member")
    argv = _validate_argv(argv)
    env = _validate_env(env)
    if not isinstance(gpu_count, int) or gpu_count < 1:
        raise ValidationError({"gpu_count": "Ask for at least one GPU."})
    limit = settings.JOBS_MAX_RUNTIME_SECONDS
    if not isinstance(max_runtime_seconds, int) or max_runtime_seconds < 1:
        raise ValidationError({"max_runtime_seconds": "The maximum runtime must be positive."})
    if max_runtime_seconds > limit:
        raise ValidationError(
            {"max_runtime_seconds": f"The maximum runtime may be at most {limit} seconds."}
        )
    if priority_class not in JobPriorityClass.values:
        raise ValidationError({"priority_class": "Unknown priority class."})
    if reservation is not None:
        if reservation.team_id != team.pk:
            raise ValidationError({"reservation": "The reservation belongs to another team."})
        if reservation.status not in RESERVATION_OPEN_STATUSES:
            raise ValidationError({"reservation": "The reservation is over or cancelled."})
        if gpu_model is not None and gpu_model.pk != reservation.gpu_model_id:
            raise ValidationError({"gpu_model": "The reservation is for another GPU model."})
        if gpu_count > reservation.count:
            held = format_count(reservation.count, "GPU")
            raise ValidationError({"gpu_count": f"The reservation holds only {held}."})
        gpu_model = reservation.gpu_model
    total, largest = fleet_size(gpu_model)
    what = f"{gpu_model.name} GPUs" if gpu_model else "GPUs"
    if same_node and gpu_count > largest:
        # Larger than any node: a multi-node gang (each node gets its rank and the rendezvous).
        same_node = False
    if gpu_count > total:
        raise ValidationError({"gpu_count": f"The fleet has only {total} {what}."})
    if priority_class == JobPriorityClass.GUARANTEED and reservation is None:
        _require_within_guarantee(team, gpu_model, gpu_count)
    with transaction.atomic():
        job = Job.objects.create(
            team=team,
            submitted_by=actor,
            name=name[:200],
            argv=argv,
            workdir=workdir,
            env=env,
            gpu_model=gpu_model,
            gpu_count=gpu_count,
            same_node=same_node,
            max_runtime_seconds=max_runtime_seconds,
            priority_class=priority_class,
            reservation=reservation,
            checkpointable=bool(checkpointable),
            pending_message="Waiting for the next scheduling cycle.",
        )
        # An execution backend (Slurm) may take the job here; its refusal undoes the submit.
        hooks.emit("job.submitted", job=job)
        messaging.trigger_schedule()
    return job
