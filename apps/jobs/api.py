from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.jobs import selectors, services
from apps.jobs.choices import JobPriorityClass
from apps.jobs.filters import JobFilter
from apps.reservations.api import GpuModelField, UserTeamField
from apps.reservations.models import Reservation
from apps.teams.permissions import can_view_team

MAX_GPUS = 100_000


class AllocationSerializer(serializers.Serializer):
    uuid = serializers.CharField(source="gpu.uuid")
    node = serializers.CharField(source="gpu.node.hostname")
    index = serializers.IntegerField(source="gpu.index")
    attempt = serializers.IntegerField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField(allow_null=True)
    over_quota = serializers.BooleanField()


class JobSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    team = serializers.CharField(source="team.slug")
    submitted_by = serializers.CharField(source="submitted_by.username")
    name = serializers.CharField()
    argv = serializers.ListField(child=serializers.CharField())
    workdir = serializers.CharField()
    env = serializers.DictField(child=serializers.CharField())
    gpu_model = serializers.CharField(source="gpu_model.name", allow_null=True, default=None)
    gpu_count = serializers.IntegerField()
    same_node = serializers.BooleanField()
    max_runtime_seconds = serializers.IntegerField()
    priority_class = serializers.CharField()
    reservation = serializers.IntegerField(source="reservation_id", allow_null=True)
    status = serializers.CharField()
    node = serializers.CharField(source="node.hostname", allow_null=True, default=None)
    exit_code = serializers.IntegerField(allow_null=True)
    submitted_at = serializers.DateTimeField()
    dispatched_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    requeue_count = serializers.IntegerField()
    checkpointable = serializers.BooleanField()
    preemption_count = serializers.IntegerField()
    gpu_seconds_lost = serializers.FloatField()
    pending_reason = serializers.CharField()
    pending_message = serializers.CharField()
    estimated_start = serializers.DateTimeField(allow_null=True)
    allocations = serializers.SerializerMethodField()
    efficiency = serializers.SerializerMethodField(
        help_text="GPU-hours held and busy, average activity (SM activity where the GPUs report "
        "it, else utilization: `activity_signal`), memory average and peak vs the GPU's, idle "
        "GPUs of the allocation. Null before it ran."
    )
    cost = serializers.SerializerMethodField(
        help_text="Charged so far by the ledger (complete hours); null for a job inside a "
        "booking (the booking pays)."
    )
    currency = serializers.SerializerMethodField()
    estimated_cost = serializers.SerializerMethodField(
        help_text="A waiting job: GPUs x maximum runtime x rate, GPUs above the team's "
        "guarantee at the over-quota price."
    )
    estimated_over_quota_gpus = serializers.SerializerMethodField()

    def get_allocations(self, job) -> list[dict]:
        return AllocationSerializer(selectors.current_allocations(job), many=True).data

    def _figure(self, job, name):
        return getattr(job, "figures", {}).get(name)

    def get_efficiency(self, job) -> dict | None:
        return self._figure(job, "efficiency")

    def get_cost(self, job) -> str | None:
        return self._figure(job, "cost")

    def get_currency(self, job) -> str | None:
        return self._figure(job, "currency")

    def get_estimated_cost(self, job) -> str | None:
        return self._figure(job, "estimated_cost")

    def get_estimated_over_quota_gpus(self, job) -> int | None:
        return self._figure(job, "estimated_over_quota_gpus")


class JobInputSerializer(serializers.Serializer):
    team = UserTeamField()
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    argv = serializers.JSONField(help_text='The command as a list, e.g. ["python", "train.py"].')
    workdir = serializers.CharField(max_length=1024, required=False, allow_blank=True, default="")
    env = serializers.JSONField(required=False, default=dict)
    gpu_model = GpuModelField(required=False, allow_null=True, default=None)
    gpu_count = serializers.IntegerField(min_value=1, max_value=MAX_GPUS)
    same_node = serializers.BooleanField(required=False, default=True)
    checkpointable = serializers.BooleanField(
        required=False,
        default=False,
        help_text="The job saves its progress on SIGTERM and resumes from it when requeued.",
    )
    max_runtime_seconds = serializers.IntegerField(min_value=1, max_value=10**9)
    priority_class = serializers.ChoiceField(
        choices=JobPriorityClass.choices, required=False, default=JobPriorityClass.OVER_QUOTA
    )
    reservation = serializers.PrimaryKeyRelatedField(
        queryset=Reservation.objects.all(), required=False, allow_null=True, default=None
    )

    def validate_reservation(self, reservation):
        # Only the caller's teams' bookings exist for them.
        user = self.context["request"].user
        if reservation is not None and not can_view_team(user, reservation.team):
            raise serializers.ValidationError("Unknown reservation.")
        return reservation


class JobCancelInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class JobLogSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    log_tail = serializers.CharField()


@extend_schema_view(
    list=extend_schema(summary="List jobs of your teams"),
    retrieve=extend_schema(summary="Get one job (status, why it waits, estimated start)"),
)
class JobViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """GPU jobs of the caller's teams. POST submits; `cancel` stops one; `log` shows its tail."""

    serializer_class = JobSerializer
    filterset_class = JobFilter
    ordering_fields = ["submitted_at", "started_at", "finished_at"]

    def get_queryset(self):
        return selectors.job_list(user=self.request.user).order_by("-submitted_at", "-id")

    def paginate_queryset(self, queryset):
        page = super().paginate_queryset(queryset)
        return None if page is None else selectors.with_figures(page)

    def get_object(self):
        return selectors.with_figures([super().get_object()])[0]

    def _reply(self, job, code=status.HTTP_200_OK):
        job = selectors.with_figures([self.get_queryset().get(pk=job.pk)])[0]
        return Response(JobSerializer(job).data, status=code)

    @extend_schema(
        summary="Submit a job", request=JobInputSerializer, responses={201: JobSerializer}
    )
    def create(self, request, *args, **kwargs):
        data = JobInputSerializer(data=request.data, context={"request": request})
        data.is_valid(raise_exception=True)
        job = services.job_submit(actor=request.user, **data.validated_data)
        return self._reply(job, status.HTTP_201_CREATED)

    @extend_schema(
        summary="Cancel a job", request=JobCancelInputSerializer, responses=JobSerializer
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        data = JobCancelInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        job = services.job_cancel(
            job=self.get_object(), actor=request.user, reason=data.validated_data["reason"]
        )
        return self._reply(job)

    @extend_schema(summary="Last lines of a job's log", responses=JobLogSerializer)
    @action(detail=True, methods=["get"])
    def log(self, request, pk=None):
        job = self.get_object()
        return Response({"id": job.pk, "status": job.status, "log_tail": job.log_tail})
