"""The live queue over the API: what the queue page shows, for scripts and dashboards."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.jobs import selectors


class QueueEntrySerializer(serializers.Serializer):
    position = serializers.IntegerField(help_text="1 = the scheduler takes it first.")
    id = serializers.IntegerField(source="job.pk")
    name = serializers.SerializerMethodField(
        help_text="Null for jobs of teams the caller does not see (as on the jobs list)."
    )
    team = serializers.CharField(source="job.team.slug")
    gpu_count = serializers.IntegerField(source="job.gpu_count")
    priority_class = serializers.CharField(source="job.priority_class")
    submitted_at = serializers.DateTimeField(source="job.submitted_at")
    pending_reason = serializers.CharField(source="job.pending_reason")
    pending_message = serializers.CharField(source="message")
    estimated_start = serializers.DateTimeField(source="job.estimated_start", allow_null=True)

    def get_name(self, entry) -> str | None:
        return entry["job"].name if entry["visible"] else None


class QueueModelSerializer(serializers.Serializer):
    gpu_model = serializers.CharField()
    jobs = QueueEntrySerializer(many=True)


class QueueTeamSerializer(serializers.Serializer):
    team = serializers.CharField(source="team.slug")
    gpu_model = serializers.CharField(source="gpu_model.name", allow_null=True, default=None)
    guaranteed = serializers.IntegerField()
    limit = serializers.IntegerField()
    used = serializers.IntegerField(source="in_use")
    borrowed = serializers.IntegerField(help_text="GPUs held above the guarantee.")


class QueueSerializer(serializers.Serializer):
    now = serializers.DateTimeField()
    models = QueueModelSerializer(many=True)
    teams = QueueTeamSerializer(many=True)


class QueueView(APIView):
    """Waiting jobs per GPU model in the scheduler's order, with the reason and estimated start
    of each, and every team's guaranteed, used and borrowed GPUs now. Any signed-in user."""

    @extend_schema(summary="The live queue", responses=QueueSerializer)
    def get(self, request):
        return Response(QueueSerializer(selectors.queue_overview(user=request.user)).data)
