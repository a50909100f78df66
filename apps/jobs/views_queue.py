"""The live queue page: every GPU model's waiting jobs and each team's GPUs now."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from apps.jobs import selectors


@login_required
def queue_view(request):
    """The whole page, or with ``?part=body`` only its body (what the page re-reads every few
    seconds to stay live)."""
    overview = selectors.queue_overview(user=request.user)
    template = "jobs/_queue_body.html" if request.GET.get("part") == "body" else "jobs/queue.html"
    return render(
        request,
        template,
        {
            **overview,
            "policy": settings.JOBS_SCHEDULER_POLICY,
            "refresh_seconds": settings.JOBS_QUEUE_REFRESH_SECONDS,
            "refresh_ms": int(settings.JOBS_QUEUE_REFRESH_SECONDS * 1000),
        },
    )
