from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from apps.jobs import selectors, services
from apps.jobs.filters import JobPageFilter
from apps.jobs.forms import JobForm
from apps.jobs.tables import JobTable
from portal.exceptions import ApplicationError, show_on_form
from portal.tables import configure


@login_required
def job_list_view(request):
    """The queue of the user's teams, newest first, with filters and sortable columns."""
    jobs = selectors.job_list(user=request.user).order_by("-submitted_at", "-id")
    filters = JobPageFilter(request.GET or None, queryset=jobs, request=request)
    table = JobTable(filters.qs)
    table.empty_text = format_html(
        'No jobs here yet. <a href="{}">Submit a job</a>.', reverse("jobs:job-submit")
    )
    configure(request, table, per_page=25)
    selectors.with_figures(row.record for row in table.page.object_list)
    return render(
        request,
        "jobs/job_list.html",
        {"table": table, "filters": filters, "problems": filters.problems()},
    )


@login_required
def job_submit_view(request):
    form = JobForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            job = services.job_submit(actor=request.user, **form.service_kwargs())
        except (ApplicationError, ValidationError) as error:
            show_on_form(form, error, field_names={"max_runtime_seconds": "max_runtime_minutes"})
        else:
            messages.success(request, f"Job #{job.pk} is queued.")
            return redirect("jobs:job-detail", pk=job.pk)
    return render(request, "jobs/job_form.html", {"form": form})


@login_required
def job_detail_view(request, pk: int):
    job = get_object_or_404(selectors.job_list(user=request.user), pk=pk)
    selectors.with_figures([job])
    return render(
        request,
        "jobs/job_detail.html",
        {
            "job": job,
            "allocations": selectors.current_allocations(job),
            # How often the page re-reads a waiting or running job.
            "poll_ms": int(getattr(settings, "JOBS_PAGE_POLL_SECONDS", 5) * 1000),
        },
    )


@login_required
@require_POST
def job_cancel_view(request, pk: int):
    job = get_object_or_404(selectors.job_list(user=request.user), pk=pk)
    try:
        services.job_cancel(job=job, actor=request.user, reason=request.POST.get("reason", ""))
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Job #{job.pk} is cancelled.")
    return redirect("jobs:job-detail", pk=job.pk)
