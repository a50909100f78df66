// Draws the figures the server built with plotly and embedded as JSON (#dashboard-figures,
// keyed by each chart's data-figure): the dashboards, the cost and the what-if pages. Times
// come as wall-clock times in the reader's zone, the axis titles naming it (portal/plotting.py).
document.addEventListener("DOMContentLoaded", function () {
  var source = document.getElementById("dashboard-figures");
  if (!source || !window.Plotly) { return; }
  var figures = JSON.parse(source.textContent);
  document.querySelectorAll("[data-figure]").forEach(function (element) {
    var figure = figures[element.dataset.figure];
    if (!figure) { return; }
    window.Plotly.newPlot(element, figure.data, figure.layout, { responsive: true, displaylogo: false });
  });
  // The custom dates only apply to a custom range: typing one selects it.
  var range = document.getElementById("f-range");
  ["f-start", "f-end"].forEach(function (id) {
    var input = document.getElementById(id);
    if (input && range) {
      input.addEventListener("input", function () { if (input.value) { range.value = "custom"; } });
    }
  });
});
