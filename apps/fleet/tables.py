import django_tables2 as tables
from django.utils.safestring import mark_safe

from apps.fleet.models import Gpu
from portal.tables import CellColumn, PortalTable

CELLS = "fleet/_gpu_cells.html"


class GpuTable(PortalTable):
    """The GPUs of one node on the fleet page. Every node's table sorts by the same `?sort=`,
    so a click on one header orders the GPUs of every node the same way."""

    index = CellColumn(CELLS, "index", verbose_name="GPU", order_by=("index", "id"))
    model = tables.Column("Model", accessor="model__name")
    uuid = CellColumn(CELLS, "uuid", verbose_name="UUID")
    nvlink_domain = tables.Column("NVLink domain", default="—")
    status = CellColumn(CELLS, "status", verbose_name="Status")
    health = CellColumn(CELLS, "health", verbose_name="Health")
    open_bookings = tables.Column("Open bookings")
    actions = CellColumn(
        CELLS, "actions", verbose_name=mark_safe('<span class="visually-hidden">Actions</span>'),
        orderable=False, accessor="pk", attrs={"td": {"class": "actions"}},
    )  # fmt: skip

    class Meta(PortalTable.Meta):
        model = Gpu
        fields = ()
        sequence = (
            "index", "model", "uuid", "nvlink_domain", "status", "health", "open_bookings",
            "actions",
        )  # fmt: skip
        row_attrs = {"id": lambda record: f"gpu-{record.pk}"}
        empty_text = "No GPUs reported by this node yet."
