import django_filters
from django.db.models import Q

from apps.fleet.choices import GpuHealth, GpuStatus, NodeStatus
from apps.fleet.models import Gpu, GpuModel, Node
from portal.tables import PageFilterSet


class NodeFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=NodeStatus.choices)
    hostname = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Node
        fields = ["status", "hostname"]


class GpuFilter(django_filters.FilterSet):
    model = django_filters.CharFilter(field_name="model__name", label="GPU model name")
    node = django_filters.CharFilter(field_name="node__hostname", label="Node hostname")
    status = django_filters.ChoiceFilter(choices=GpuStatus.choices)
    health = django_filters.ChoiceFilter(choices=GpuHealth.choices)
    nvlink_domain = django_filters.CharFilter()
    mig = django_filters.BooleanFilter(
        field_name="mig_parent", lookup_expr="isnull", exclude=True, label="Only MIG devices"
    )

    class Meta:
        model = Gpu
        fields = ["model", "node", "status", "health", "nvlink_domain", "mig"]


class FleetPageFilter(PageFilterSet):
    """The fleet page's filters over physical GPUs: `q` searches hostnames, UUIDs and NVLink
    domains; the menus pick a GPU model, GPU status, health or node status. A node shows
    while one of its GPUs matches."""

    q = django_filters.CharFilter(method="search", label="Search")
    model = django_filters.ModelChoiceFilter(
        queryset=GpuModel.objects.all(), to_field_name="name", empty_label="Any model",
        label="GPU model",
    )  # fmt: skip
    status = django_filters.ChoiceFilter(choices=GpuStatus.choices, empty_label="Any status")
    health = django_filters.ChoiceFilter(choices=GpuHealth.choices, empty_label="Any health")
    node_status = django_filters.ChoiceFilter(
        field_name="node__status", choices=NodeStatus.choices, empty_label="Any",
        label="Node status",
    )  # fmt: skip

    class Meta:
        model = Gpu
        fields = ["q", "model", "status", "health", "node_status"]

    def search(self, queryset, name, value):
        for word in value.split():
            queryset = queryset.filter(
                Q(node__hostname__icontains=word)
                | Q(uuid__icontains=word)
                | Q(nvlink_domain__icontains=word)
            )
        return queryset
