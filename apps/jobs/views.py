from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from apps.jobs import selectors, services
from apps.jobs.forms import JobFilterForm, JobForm
from portal.exceptions import ApplicationError, show_on_form


@login_required
def job_list_view(request):
    """The queue of the user's teams, newest first, with filters."""
    form = JobFilterForm(request.GET or None, user=request.user)
    jobs = selectors.job_list(user=request.user).order_by("-submitted_at", "-id")
    if form.is_valid():
        data = form.cleaned_data
        if data.get("team"):
            jobs = jobs.filter(team=data["team"])
        if data.get("status"):
            jobs = jobs.filter(status=data["status"])
        if data.get("gpu_model"):
            jobs = jobs.filter(gpu_model=data["gpu_model"])
        if data.get("mine"):
            jobs = jobs.filter(submitted_by=request.user)
    page = Paginator(jobs, 25).get_page(request.GET.get("page"))
    page.object_list = selectors.with_figures(page.object_list)
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "jobs/job_list.html",
        {"page": page, "filter_form": form, "query": query.urlencode()},
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
