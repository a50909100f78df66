"""Business rules of the Slurm integration: jobs, bookings and quotas mirrored into Slurm.

The portal stays the source of truth for who may book and submit (quota, budget, roles); Slurm
places and runs the work. Hook subscribers (`on_*`, named in settings `SLURM_HOOKS`) run inside
the portal's transaction: when Slurm refuses, they raise `SlurmRefused` and the booking, job or
quota edit is rolled back with Slurm's reason. Beat tasks poll job states (`jobs_poll`) and
correct drift (`quotas_sync`, `reservations_reconcile`).

Split by what is mirrored (common, jobs, bookings, nodes, quotas, accounting); this package
exports their public names, which settings (`SLURM_HOOKS`), tasks and commands use.
"""

from apps.integrations.slurm.services.accounting import (  # noqa: F401
    IMPORT_USERNAME,
    IMPORTED_ARGV,
    accounting_import,
)
from apps.integrations.slurm.services.bookings import (  # noqa: F401
    on_reservation_created,
    on_reservation_ended,
    on_reservation_extended,
    reservations_reconcile,
)
from apps.integrations.slurm.services.common import (  # noqa: F401
    LOG_TAIL_CHARS,
    SlurmRefused,
    _cluster_name,
    client,
    cluster_name,
    gpu_type,
    reservation_name,
    slurm_backend,
)
from apps.integrations.slurm.services.jobs import (  # noqa: F401
    jobs_poll,
    jobs_reconcile,
    on_job_cancelled,
    on_job_submitted,
    slurm_job_submit,
)
from apps.integrations.slurm.services.nodes import (  # noqa: F401
    DRAIN_REASON_PREFIX,
    OUT_OF_SERVICE_STATES,
    nodes_out_of_service,
    nodes_sync,
    on_node_state_changed,
    out_of_service,
)
from apps.integrations.slurm.services.quotas import (  # noqa: F401
    desired_limits,
    limits_drift,
    on_quota_changed,
    on_team_moved,
    on_unit_changed,
    quota_sync_team,
    quotas_sync,
    unit_account,
    unit_sync,
)
