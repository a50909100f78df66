// Draws the cost dashboard's figures, which the server embeds as JSON (built with plotly).
document.addEventListener("DOMContentLoaded", function () {
  var source = document.getElementById("cost-figures");
  if (!source || !window.Plotly) { return; }
  var figures = JSON.parse(source.textContent);
  document.querySelectorAll("[data-figure]").forEach(function (element) {
    var figure = figures[element.dataset.figure];
    if (!figure) { return; }
    window.Plotly.newPlot(element, figure.data, figure.layout, { responsive: true, displaylogo: false });
  });
});
