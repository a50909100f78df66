import django_filters

from apps.fleet.choices import GpuHealth, GpuStatus, NodeStatus
from apps.fleet.models import Gpu, Node


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
