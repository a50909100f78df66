from django.contrib import admin, messages

from apps.jobs import services
from apps.jobs.models import Job, JobAllocation
from portal.exceptions import ApplicationError


class JobAllocationInline(admin.TabularInline):
    model = JobAllocation
    extra = 0
    can_delete = False
    readonly_fields = ("gpu", "attempt", "start", "end", "over_quota")

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Jobs are read-only here; cancel and preempt go through the services (audited)."""

    list_display = (
        "id",
        "name",
        "team",
        "status",
        "gpu_count",
        "gpu_model",
        "node",
        "submitted_at",
    )
    list_filter = ("status", "priority_class", "team", "gpu_model")
    search_fields = ("name", "team__slug", "submitted_by__username")
    inlines = [JobAllocationInline]
    actions = ["cancel_selected", "preempt_selected"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Job._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def _each(self, request, queryset, change) -> None:
        for job in queryset:
            try:
                change(job)
            except ApplicationError as error:
                self.message_user(request, f"#{job.pk}: {error.message}", messages.WARNING)

    @admin.action(description="Cancel selected jobs (audited)")
    def cancel_selected(self, request, queryset):
        self._each(
            request,
            queryset,
            lambda job: services.job_cancel(
                job=job, actor=request.user, reason="Django admin", audit=True
            ),
        )

    @admin.action(description="Preempt selected running jobs and requeue them (audited)")
    def preempt_selected(self, request, queryset):
        self._each(request, queryset, lambda job: services.job_preempt(job=job, actor=request.user))
