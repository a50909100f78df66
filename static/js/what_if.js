// The what-if page follows a replay the worker runs: every second or two it reads the run's
// progress and moves the bar; when the run is done (or failed) it reloads to show the result.
(function () {
  var root = document.querySelector("[data-whatif-poll]");
  if (!root || !root.querySelector("[data-testid=whatif-progress]")) { return; }
  var url = root.dataset.whatifPoll;
  var every = Number(root.dataset.pollMs) || 1500;
  var bar = root.querySelector("[data-testid=whatif-progress]");
  var percent = root.querySelector("[data-testid=whatif-progress-percent]");

  function update(run) {
    if (run.status === "done" || run.status === "failed") {
      window.location.reload();
      return false;
    }
    if (bar) { bar.value = run.progress; bar.textContent = run.progress + "%"; }
    if (percent) { percent.textContent = run.progress; }
    return true;
  }

  function poll() {
    fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (run) {
        if (!run || update(run)) { window.setTimeout(poll, every); }
      })
      .catch(function () { window.setTimeout(poll, every * 2); });
  }
  window.setTimeout(poll, every);
})();
