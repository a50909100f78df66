"""What every part of the Slurm integration shares: the client, the refusal, names."""

from functools import cache

from django.conf import settings
from rest_framework import status

from apps.fleet.models import GpuModel
from apps.integrations.slurm.client import (
    SlurmClient,
    SlurmError,
)
from apps.reservations.models import Reservation
from portal.exceptions import ApplicationError

LOG_TAIL_CHARS = 16_000


class SlurmRefused(ApplicationError):
    """Slurm refused (or could not be asked to do) what the portal asked; nothing was saved."""

    code = "slurm_refused"
    status_code = status.HTTP_409_CONFLICT


def client() -> SlurmClient:
    return SlurmClient()


def _refused(what: str, error: SlurmError) -> SlurmRefused:
    return SlurmRefused(
        f"Slurm refused {what}: {error.reason}",
        detail={"command": " ".join(error.command[:3]), "slurm": error.output[-2000:]},
    )


def slurm_backend() -> bool:
    return settings.JOB_BACKEND == "slurm"


@cache
def _cluster_name(conf: str, configured: str) -> str:
    if configured:
        return configured
    for line in client().run("scontrol", "show", "config").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "ClusterName":
            return value.strip()
    raise SlurmError("scontrol show config did not name the cluster; set SLURM_CLUSTER.")


def cluster_name() -> str:
    """The Slurm cluster's name (settings SLURM_CLUSTER, else asked once from slurmctld)."""
    return _cluster_name(settings.SLURM_CONF, settings.SLURM_CLUSTER)


def gpu_type(gpu_model: GpuModel | None) -> str:
    """Slurm's gres type for a portal GPU model (SLURM_GPU_TYPES, else the name lowercased)."""
    if gpu_model is None:
        return ""
    return settings.SLURM_GPU_TYPES.get(gpu_model.name, gpu_model.name.lower())


def _model_for_type(type_name: str) -> GpuModel | None:
    for model in GpuModel.objects.all():
        if gpu_type(model) == type_name:
            return model
    return None


def reservation_name(reservation: Reservation) -> str:
    return f"{settings.SLURM_RESERVATION_PREFIX}{reservation.pk}"
