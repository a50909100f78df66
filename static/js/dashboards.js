// Draws the figures the server built with plotly and embedded as JSON (#dashboard-figures,
// keyed by each chart's data-figure): the dashboards, the cost and the what-if pages.
document.addEventListener("DOMContentLoaded", function () {
  var source = document.getElementById("dashboard-figures");
  if (!source || !window.Plotly) { return; }
  var figures = JSON.parse(source.textContent);
  document.querySelectorAll("[data-figure]").forEach(function (element) {
    var figure = figures[element.dataset.figure];
    if (!figure) { return; }
    inReadersZone(figure);
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

// The server sends times in UTC with their offset and titles time axes "... (UTC)"; plotly.js
// would draw them as UTC wall-clock times. Redraw them in the reader's zone and name it, as
// portal.js does for every <time> on the page.
var ZONED = /^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)$/;
function wallClock(value) {
  if (typeof value !== "string" || !ZONED.test(value)) { return value; }
  var d = new Date(value);
  var pad = function (n) { return String(n).padStart(2, "0"); };
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
    pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
}
function inReadersZone(figure) {
  (figure.data || []).forEach(function (trace) {
    ["x", "base"].forEach(function (key) {
      if (Array.isArray(trace[key])) { trace[key] = trace[key].map(wallClock); }
    });
  });
  var axis = figure.layout && figure.layout.xaxis;
  if (!axis) { return; }
  if (Array.isArray(axis.range)) { axis.range = axis.range.map(wallClock); }
  var title = axis.title && axis.title.text;
  if (title && title.indexOf("(UTC)") !== -1 && window.portalTime) {
    axis.title.text = title.replace("(UTC)", "(" + window.portalTime.zoneName() + ")");
  }
}
