from collections.abc import Mapping
from datetime import timedelta

from django.db.models import Exists, OuterRef, Prefetch, prefetch_related_objects
from django.utils import timezone
from django.utils.encoding import smart_str
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.fleet.models import GpuModel
from apps.reservations import booking, selectors, services
from apps.reservations.availability import round_up_to_slot
from apps.reservations.filters import ReservationFilter
from apps.reservations.models import ReservationGpu
from apps.reservations.policy import BookingPolicy
from apps.teams.models import Membership, Team

MAX_COUNT = 100_000


class AwareDateTimeField(serializers.DateTimeField):
    """Times must carry a zone (Z or +hh:mm); they are stored in UTC."""

    def enforce_timezone(self, value):
        if timezone.is_naive(value):
            self.fail("naive")
        return super().enforce_timezone(value)

    default_error_messages = {
        **serializers.DateTimeField.default_error_messages,
        "naive": "Give the time zone, e.g. 2026-12-03T09:00:00Z or +01:00.",
    }


class _ReadWithTheForm:
    """A related field whose object the form may have read already, with its other references
    in one query (`ReservationInputSerializer.references`: the object, or None when there is
    none, keyed by field name and value); anything else is looked up as the field always
    does."""

    def to_internal_value(self, data):
        references = getattr(self.parent, "references", None) or {}
        key = (self.field_name, data)
        if isinstance(data, str) and key in references:
            found = references[key]
            if found is None:
                self.fail("does_not_exist", slug_name=self.slug_field, value=smart_str(data))
            return found
        return super().to_internal_value(data)


@extend_schema_field(OpenApiTypes.STR)  # a team slug
class UserTeamField(_ReadWithTheForm, serializers.SlugRelatedField):
    """A team slug, looked up only among the teams the caller may see (no existence leak)."""

    def __init__(self, **kwargs):
        super().__init__(slug_field="slug", **kwargs)

    def get_queryset(self):
        # Whether the caller belongs to the team is read with it: booking requires it, and a
        # unit admin sees teams they are no member of.
        user = self.context["request"].user
        return Team.objects.for_user(user).annotate(
            caller_is_member=Exists(Membership.objects.filter(team=OuterRef("pk"), user_id=user.pk))
        )


@extend_schema_field(OpenApiTypes.STR)  # a GPU model name
class GpuModelField(_ReadWithTheForm, serializers.SlugRelatedField):
    """A GPU model by name, read with its fleet size (see ``get_queryset``)."""

    def __init__(self, **kwargs):
        super().__init__(slug_field="name", **kwargs)

    def get_queryset(self):
        # With its fleet size, which booking admission checks the count against. Built when a
        # lookup needs it, not with every copy of the field (each form copies its fields).
        return booking.with_fleet_size(GpuModel.objects.all())


class HoldingSerializer(serializers.Serializer):
    uuid = serializers.CharField(source="gpu.uuid")
    node = serializers.CharField(source="gpu.node.hostname")
    index = serializers.IntegerField(source="gpu.index")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()


class ReservationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    team = serializers.CharField(source="team.slug")
    created_by = serializers.CharField(source="created_by.username")
    gpu_model = serializers.CharField(source="gpu_model.name")
    count = serializers.IntegerField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    status = serializers.CharField()
    purpose = serializers.CharField()
    same_node = serializers.BooleanField()
    over_quota = serializers.BooleanField()
    gpus = serializers.SerializerMethodField()
    ended_at = serializers.DateTimeField(allow_null=True)
    end_reason = serializers.CharField()
    released_gpu_hours = serializers.DecimalField(max_digits=12, decimal_places=4)
    created_at = serializers.DateTimeField()

    efficiency = serializers.SerializerMethodField(
        help_text="GPU-hours held and busy, average activity (SM activity where the GPUs report "
        "it, else utilization: `activity_signal`), memory average and peak vs the GPU's, idle "
        "GPUs. Null before it starts."
    )
    cost = serializers.SerializerMethodField(help_text="Charged so far by the ledger.")
    currency = serializers.SerializerMethodField()

    def get_efficiency(self, reservation) -> dict | None:
        return getattr(reservation, "figures", {}).get("efficiency")

    def get_cost(self, reservation) -> str | None:
        return getattr(reservation, "figures", {}).get("cost")

    def get_currency(self, reservation) -> str | None:
        return getattr(reservation, "figures", {}).get("currency")

    def get_gpus(self, reservation) -> list[dict]:
        return HoldingSerializer(
            [h for h in reservation.holdings.all() if h.active], many=True
        ).data


def _active_holdings() -> Prefetch:
    return Prefetch(
        "holdings",
        queryset=ReservationGpu.objects.filter(active=True).select_related("gpu__node"),
    )


class ReservationInputSerializer(serializers.Serializer):
    team = UserTeamField()
    gpu_model = GpuModelField()
    count = serializers.IntegerField(min_value=1, max_value=MAX_COUNT)
    start = AwareDateTimeField()
    end = AwareDateTimeField(required=False)
    duration = serializers.DurationField(
        required=False,
        min_value=timedelta(0),
        max_value=timedelta(days=3650),
        help_text='Instead of end: e.g. "04:00:00" or "P1DT2H".',
    )
    purpose = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    same_node = serializers.BooleanField(required=False, default=False)

    def to_internal_value(self, data):
        # The team and the model in one query (their fields' lookups answer from it).
        if isinstance(data, Mapping):
            team, model = data.get("team"), data.get("gpu_model")
            team_slug = team if isinstance(team, str) and "\x00" not in team else None
            model_name = model if isinstance(model, str) and "\x00" not in model else None
            if team_slug is not None or model_name is not None:
                found = selectors.booking_references(
                    user=self.context["request"].user,
                    team_slug=team_slug,
                    gpu_model_name=model_name,
                )
                self.references = {
                    key: value
                    for key, value in zip(
                        (("team", team_slug), ("gpu_model", model_name)), found, strict=True
                    )
                    if key[1] is not None
                }
        return super().to_internal_value(data)

    def validate(self, data):
        if ("end" in data) == ("duration" in data):
            raise serializers.ValidationError({"end": "Give either end or duration, not both."})
        if "duration" in data:
            data["end"] = data["start"] + data.pop("duration")
        return data


class CancelInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class ExtendInputSerializer(serializers.Serializer):
    end = AwareDateTimeField()


@extend_schema_view(
    list=extend_schema(summary="List reservations of your teams"),
    retrieve=extend_schema(summary="Get one reservation"),
)
class ReservationViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """GPU bookings of the caller's teams. POST books; `cancel` and `extend` change one."""

    serializer_class = ReservationSerializer
    filterset_class = ReservationFilter
    ordering_fields = ["start", "end", "created_at"]

    def get_queryset(self):
        return (
            selectors.reservation_list(user=self.request.user)
            .prefetch_related(_active_holdings())
            .order_by("-start", "-id")
        )

    def paginate_queryset(self, queryset):
        page = super().paginate_queryset(queryset)
        return None if page is None else selectors.with_figures(page)

    def get_object(self):
        return selectors.with_figures([super().get_object()])[0]

    def _reply(self, reservation, code=status.HTTP_200_OK):
        reservation = selectors.with_figures([self.get_queryset().get(pk=reservation.pk)])[0]
        return Response(ReservationSerializer(reservation).data, status=code)

    def _reply_created(self, reservation):
        """The new booking as the service returned it (its team, model and booker are already
        loaded) and its GPUs as the pick read them: only the higher apps' figures are read."""
        picked = getattr(reservation, "picked_holdings", None)
        if picked is None:
            prefetch_related_objects([reservation], _active_holdings())
        else:
            # As prefetch_related leaves a relation: a queryset already read.
            holdings = reservation.holdings.all()
            holdings._result_cache, holdings._prefetch_done = picked, True
            reservation._prefetched_objects_cache = {"holdings": holdings}
        reservation = selectors.with_figures([reservation])[0]
        return Response(ReservationSerializer(reservation).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Book GPUs",
        request=ReservationInputSerializer,
        responses={201: ReservationSerializer},
    )
    def create(self, request, *args, **kwargs):
        data = ReservationInputSerializer(data=request.data, context={"request": request})
        data.is_valid(raise_exception=True)
        reservation = services.reservation_create(user=request.user, **data.validated_data)
        return self._reply_created(reservation)

    @extend_schema(
        summary="Cancel a reservation",
        request=CancelInputSerializer,
        responses=ReservationSerializer,
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        data = CancelInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reservation = services.reservation_cancel(
            reservation=self.get_object(), actor=request.user, reason=data.validated_data["reason"]
        )
        return self._reply(reservation)

    @extend_schema(
        summary="Extend a reservation",
        request=ExtendInputSerializer,
        responses=ReservationSerializer,
    )
    @action(detail=True, methods=["post"])
    def extend(self, request, pk=None):
        data = ExtendInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reservation = services.reservation_extend(
            reservation=self.get_object(), actor=request.user, new_end=data.validated_data["end"]
        )
        return self._reply(reservation)


class AvailabilityQuerySerializer(serializers.Serializer):
    gpu_model = GpuModelField()
    count = serializers.IntegerField(min_value=1, max_value=MAX_COUNT, default=1)
    duration = serializers.DurationField(
        min_value=timedelta(minutes=1), max_value=timedelta(days=3650), default=timedelta(hours=1)
    )
    after = AwareDateTimeField(required=False)
    same_node = serializers.BooleanField(required=False, default=False)
    limit = serializers.IntegerField(min_value=1, max_value=20, default=5)


class SlotSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    latest_start = serializers.DateTimeField()
    gpus = serializers.ListField(child=serializers.DictField())


class AvailabilityResponseSerializer(serializers.Serializer):
    """What GET /availability/ answers (for the schema)."""

    gpu_model = serializers.CharField()
    count = serializers.IntegerField()
    duration = serializers.CharField()
    slots = SlotSerializer(many=True)


class TimelinePointSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    free = serializers.IntegerField()


class TimelineResponseSerializer(serializers.Serializer):
    """What GET /availability/timeline/ answers (for the schema)."""

    gpu_model = serializers.CharField()
    bucket = serializers.CharField()
    points = TimelinePointSerializer(many=True)


class TimelineQuerySerializer(serializers.Serializer):
    gpu_model = GpuModelField()
    start = AwareDateTimeField(required=False)
    end = AwareDateTimeField(required=False)
    bucket = serializers.DurationField(
        min_value=timedelta(minutes=15), max_value=timedelta(days=7), default=timedelta(hours=1)
    )

    def validate(self, data):
        now = timezone.now()
        data.setdefault("start", now.replace(minute=0, second=0, microsecond=0))
        data.setdefault("end", data["start"] + timedelta(days=7))
        if data["end"] <= data["start"]:
            raise serializers.ValidationError({"end": "The end must be after the start."})
        if (data["end"] - data["start"]) / data["bucket"] > 2000:
            raise serializers.ValidationError({"bucket": "Too many buckets; use a larger bucket."})
        return data


def _slot_payload(slot, duration) -> dict:
    return {
        "start": slot.start,
        "end": slot.start + duration,
        "latest_start": slot.latest_start,
        "gpus": [{"uuid": g.uuid, "node": g.node, "index": g.index} for g in slot.gpus],
    }


class AvailabilityView(APIView):
    """Earliest slots where `count` GPUs of a model are free for `duration` (on one node first,
    then one NVLink domain). Durations round up to the booking grid."""

    @extend_schema(
        summary="Find free slots for a booking",
        parameters=[AvailabilityQuerySerializer],
        responses=AvailabilityResponseSerializer,
    )
    def get(self, request):
        query = AvailabilityQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        policy = BookingPolicy.from_settings()
        duration = round_up_to_slot(query.validated_data["duration"], policy.slot)
        slots = selectors.slots_from_now(**{**query.validated_data, "duration": duration})
        return Response(
            {
                "gpu_model": query.validated_data["gpu_model"].name,
                "count": query.validated_data["count"],
                "duration": str(duration),
                "slots": SlotSerializer(
                    [_slot_payload(s, duration) for s in slots], many=True
                ).data,
            }
        )


class AvailabilityTimelineView(APIView):
    """Free GPUs of a model per time bucket (free for the whole bucket), for calendar views."""

    @extend_schema(
        summary="Free GPUs of a model over time",
        parameters=[TimelineQuerySerializer],
        responses=TimelineResponseSerializer,
    )
    def get(self, request):
        query = TimelineQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        points = selectors.free_capacity(
            gpu_model=data["gpu_model"], start=data["start"], end=data["end"], bucket=data["bucket"]
        )
        return Response(
            {
                "gpu_model": data["gpu_model"].name,
                "bucket": str(data["bucket"]),
                "points": [{"start": t, "free": free} for t, free in points],
            }
        )
