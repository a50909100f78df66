// Draws the what-if comparison the server built with plotly.
document.addEventListener("DOMContentLoaded", function () {
  var source = document.getElementById("whatif-figure");
  var element = document.querySelector("[data-figure='wait']");
  if (!source || !element || !window.Plotly) { return; }
  var figure = JSON.parse(source.textContent);
  window.Plotly.newPlot(element, figure.data, figure.layout, { responsive: true, displaylogo: false });
});
