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
