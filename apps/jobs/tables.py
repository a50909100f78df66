import django_tables2 as tables

from apps.jobs.models import Job
from portal.tables import CellColumn, PortalTable

CELLS = "jobs/_cells.html"


def _cell(part: str) -> dict:
    return {"template_name": CELLS, "part": part}


class JobTable(PortalTable):
    """The jobs page. Cost and efficiency come from higher apps for the shown page only
    (`with_figures`), so they are not sortable."""

    id = CellColumn(verbose_name="#", **_cell("id"))
    name = CellColumn(verbose_name="Name", **_cell("name"))
    team = tables.Column("Team", accessor="team__slug")
    gpus = CellColumn(
        verbose_name="GPUs", order_by=("gpu_count", "gpu_model__name"), **_cell("gpus")
    )
    priority_class = CellColumn(
        verbose_name="Class", attrs={"td": {"class": "nowrap"}}, **_cell("class")
    )
    status = CellColumn(verbose_name="Status", **_cell("status"))
    submitted_at = CellColumn(
        verbose_name="Submitted", order_by=("submitted_at", "id"), **_cell("submitted")
    )
    submitted_by = tables.Column("By", accessor="submitted_by__username")
    where = CellColumn(
        verbose_name="Why pending / node", orderable=False, accessor="pk", **_cell("where")
    )
    cost = CellColumn(
        verbose_name="Cost", orderable=False, accessor="pk",
        attrs={"td": {"data-testid": "job-cost"}}, **_cell("cost"),
    )  # fmt: skip
    efficiency = CellColumn(
        verbose_name="Efficiency", orderable=False, accessor="pk",
        attrs={"td": {"data-testid": "job-efficiency"}}, **_cell("efficiency"),
    )  # fmt: skip

    class Meta(PortalTable.Meta):
        model = Job
        fields = ()
        sequence = (
            "id", "name", "team", "gpus", "priority_class", "status", "submitted_at",
            "submitted_by", "where", "cost", "efficiency",
        )  # fmt: skip
        attrs = {"data-testid": "job-table"}
        row_attrs = {"data-job": lambda record: record.pk}
