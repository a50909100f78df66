from datetime import timedelta

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.fleet.models import Gpu
from apps.reservations.api import AwareDateTimeField
from apps.teams.models import Team
from apps.telemetry import selectors


class WindowQuerySerializer(serializers.Serializer):
    start = AwareDateTimeField(required=False, help_text="Default: 24 hours ago.")
    end = AwareDateTimeField(required=False, help_text="Default: now.")

    def validate(self, data):
        data.setdefault("end", timezone.now())
        data.setdefault("start", data["end"] - timedelta(hours=24))
        if data["end"] <= data["start"]:
            raise serializers.ValidationError({"end": "The end must be after the start."})
        if data["end"] - data["start"] > timedelta(days=400):
            raise serializers.ValidationError({"start": "Ask for at most 400 days at once."})
        return data


class SeriesQuerySerializer(WindowQuerySerializer):
    step = serializers.DurationField(
        required=False,
        min_value=timedelta(seconds=15),
        max_value=timedelta(days=31),
        help_text="Bucket size; default: the window split into about 300 points.",
    )

    def validate(self, data):
        data = super().validate(data)
        span = data["end"] - data["start"]
        data.setdefault("step", max(timedelta(seconds=15), span / 300))
        if span / data["step"] > selectors.MAX_POINTS:
            raise serializers.ValidationError(
                {"step": f"That is more than {selectors.MAX_POINTS} points; use a larger step."}
            )
        return data


class SeriesPointSerializer(serializers.Serializer):
    t = serializers.DateTimeField()
    util_avg = serializers.FloatField(allow_null=True)
    util_max = serializers.IntegerField(allow_null=True)
    mem_used_mib = serializers.FloatField(allow_null=True)
    power_w = serializers.FloatField(allow_null=True)
    sm_active = serializers.FloatField(
        allow_null=True, help_text="SM activity % (GPM, Hopper and newer); null without GPM."
    )


class GpuSeriesResponseSerializer(serializers.Serializer):
    gpu = serializers.CharField()
    step = serializers.CharField()
    points = SeriesPointSerializer(many=True)


class GpuTelemetryView(APIView):
    """One GPU's utilization, SM activity, memory and power over a window, downsampled on the
    server."""

    @extend_schema(parameters=[SeriesQuerySerializer], responses=GpuSeriesResponseSerializer)
    def get(self, request, pk: int):
        gpu = get_object_or_404(Gpu, pk=pk)
        query = SeriesQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        points = selectors.gpu_series(
            gpu_id=gpu.pk, start=data["start"], end=data["end"], step=data["step"]
        )
        return Response(
            GpuSeriesResponseSerializer(
                {"gpu": gpu.uuid, "step": str(data["step"]), "points": points}
            ).data
        )


class IdleView(APIView):
    """Idle GPU-hours (held-but-idle per team, unallocated) over a window, and idle GPUs now.
    Members see their teams' held-idle hours and the unallocated capacity."""

    @extend_schema(parameters=[WindowQuerySerializer], responses=OpenApiTypes.OBJECT)
    def get(self, request):
        query = WindowQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        user = request.user
        summary = selectors.idle_summary(
            start=query.validated_data["start"],
            end=query.validated_data["end"],
            teams=None if user.sees_all_teams else Team.objects.for_user(user),
        )
        return Response(summary)
