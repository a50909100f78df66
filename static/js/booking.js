// "Find free slots" sends the booking form by GET: leave the CSRF token out of that request,
// so it never lands in the address bar, the history or a server log.
(function () {
  var form = document.getElementById("booking-form");
  if (!form) { return; }
  var token = form.querySelector("input[name=csrfmiddlewaretoken]");
  form.addEventListener("submit", function (event) {
    if (token) { token.disabled = Boolean(event.submitter && event.submitter.hasAttribute("data-search-slots")); }
  });
  // Coming back to the page from history must leave "Book" working.
  window.addEventListener("pageshow", function () { if (token) { token.disabled = false; } });
})();

// The price before booking: asks the booking-price API (the same price function that budget
// admission and metering use) whenever the team, model, GPUs, start or duration change.
(function () {
  var form = document.getElementById("booking-form");
  var panel = document.querySelector("[data-testid=booking-price]");
  var problem = document.querySelector("[data-testid=booking-price-error]");
  if (!form || !panel) { return; }
  var pending = null;
  function field(name) { var el = form.elements[name]; return el ? el.value : ""; }
  function show(price) {
    panel.querySelectorAll("[data-price]").forEach(function (el) {
      el.textContent = price[el.getAttribute("data-price")];
    });
    var over = panel.querySelector("[data-price-note=over_quota_gpus]");
    over.textContent = price.over_quota_gpus > 0
      ? "(" + price.over_quota_gpus + " of " + price.count + " GPUs above the guarantee)"
      : "(all GPUs within the guarantee)";
    var unpriced = panel.querySelector("[data-price-note=unpriced]");
    unpriced.textContent = Number(price.unpriced_gpu_hours) > 0
      ? price.unpriced_gpu_hours + " GPU-hours have no rate card yet and are not priced." : "";
    panel.hidden = false;
    problem.hidden = true;
  }
  function refuse(message) {
    panel.hidden = true;
    problem.textContent = message;
    problem.hidden = !message;
  }
  function quote() {
    var start = field("start");
    if (!start || !field("count") || !field("duration_hours")) { refuse(""); return; }
    var when = new Date(start);
    if (isNaN(when.getTime())) { refuse(""); return; }
    var query = new URLSearchParams({
      team: field("team"), gpu_model: field("gpu_model"), count: field("count"),
      start: when.toISOString(), duration_hours: field("duration_hours"),
    });
    fetch(panel.getAttribute("data-price-url") + "?" + query.toString(), {
      credentials: "same-origin", headers: { Accept: "application/json" },
    }).then(function (response) {
      return response.json().then(function (body) { return { ok: response.ok, body: body }; });
    }).then(function (answer) {
      if (answer.ok) { show(answer.body); return; }
      var body = answer.body || {};
      var first = Object.keys(body).map(function (k) { return [].concat(body[k]).join(" "); })[0];
      refuse("No price: " + (body.detail || first || "the request was refused."));
    }).catch(function () { refuse("The price could not be fetched."); });
  }
  form.addEventListener("input", function () { clearTimeout(pending); pending = setTimeout(quote, 300); });
  form.addEventListener("change", quote);
  quote();
})();
