// A live part of a page: every few seconds it re-reads its HTML from data-live-url and swaps
// it in. A failed read keeps what is shown and tries again later.
(function () {
  document.querySelectorAll("[data-live-url]").forEach(function (root) {
    var every = Number(root.dataset.liveMs) || 10000;
    function refresh() {
      fetch(root.dataset.liveUrl, { headers: { Accept: "text/html" }, credentials: "same-origin" })
        .then(function (response) {
          if (!response.ok) { throw new Error(response.status); }
          return response.text();
        })
        .then(function (html) {
          root.innerHTML = html;
          root.dispatchEvent(new CustomEvent("live:updated"));
          window.setTimeout(refresh, every);
        })
        .catch(function () { window.setTimeout(refresh, every * 2); });
    }
    window.setTimeout(refresh, every);
  });
})();
