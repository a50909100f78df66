import django_tables2 as tables
from django.utils.safestring import mark_safe

from apps.reservations.models import Reservation
from portal.tables import CellColumn, PortalTable

CELLS = "reservations/_cells.html"


def _cell(part: str) -> dict:
    return {"template_name": CELLS, "part": part}


class ReservationTable(PortalTable):
    """The reservations page. Cost and efficiency come from higher apps for the shown page
    only (`with_figures`), so they are not sortable."""

    id = CellColumn(verbose_name="#", **_cell("id"))
    team = CellColumn(verbose_name="Team", order_by=("team__slug",), **_cell("team"))
    gpus = CellColumn(verbose_name="GPUs", order_by=("count", "gpu_model__name"), **_cell("gpus"))
    start = CellColumn(verbose_name="Start", order_by=("start", "id"), **_cell("start"))
    end = CellColumn(verbose_name="End", order_by=("end", "id"), **_cell("end"))
    status = CellColumn(verbose_name="Status", **_cell("status"))
    created_by = tables.Column("Booked by", accessor="created_by__username")
    purpose = tables.Column("Purpose", default="—")
    cost = CellColumn(
        verbose_name="Cost", orderable=False, accessor="pk",
        attrs={"td": {"data-testid": "reservation-cost"}}, **_cell("cost"),
    )  # fmt: skip
    efficiency = CellColumn(
        verbose_name="Efficiency", orderable=False, accessor="pk",
        attrs={"td": {"data-testid": "reservation-efficiency"}}, **_cell("efficiency"),
    )  # fmt: skip
    actions = CellColumn(
        verbose_name=mark_safe('<span class="visually-hidden">Actions</span>'),
        orderable=False, accessor="pk", attrs={"td": {"class": "actions"}},
        **_cell("actions"),
    )  # fmt: skip

    class Meta(PortalTable.Meta):
        model = Reservation
        fields = ()
        sequence = (
            "id", "team", "gpus", "start", "end", "status", "created_by", "purpose", "cost",
            "efficiency", "actions",
        )  # fmt: skip
        attrs = {"data-testid": "reservation-table"}
        row_attrs = {"data-reservation": lambda record: record.pk}
