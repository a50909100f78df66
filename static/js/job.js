// The job page follows its job while it waits or runs: every few seconds it reads the job from
// the API and updates why it waits and when it should start; when the status changes it reloads,
// so the GPUs, times and log of the new state are shown.
(function () {
  var root = document.querySelector("[data-job-poll]");
  if (!root) { return; }
  var url = root.dataset.jobPoll;
  var status = root.dataset.jobStatus;
  var every = Number(root.dataset.pollMs) || 5000;

  function showTime(iso) {
    var moment = new Date(iso);
    if (window.portalTime) { return window.portalTime.format(moment, "datetime"); }
    return moment.toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
  }

  function update(job) {
    if (job.status !== status) {
      window.location.reload();
      return false;
    }
    var message = document.querySelector("[data-testid=pending-message]");
    if (message) { message.textContent = job.pending_message || "Waiting for the next scheduling cycle."; }
    var estimate = document.querySelector("[data-testid=estimated-start]");
    if (estimate) {
      if (job.estimated_start) {
        estimate.className = "";
        estimate.textContent = "Estimated start: " + showTime(job.estimated_start);
      } else {
        estimate.className = "muted";
        estimate.textContent = job.pending_reason === "beyond_quota"
          ? "No estimated start: the job waits for its team's quota to change."
          : "No estimated start yet.";
      }
    }
    return true;
  }

  function poll() {
    fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (job) {
        if (!job || update(job)) { window.setTimeout(poll, every); }
      })
      .catch(function () { window.setTimeout(poll, every * 2); });
  }
  window.setTimeout(poll, every);
})();
