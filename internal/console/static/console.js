// Outbox Relay console: the overview refreshes itself, and forms marked
// data-confirm ask before they are sent. Every page works without this.
"use strict";
(function () {
  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) {
      e.preventDefault();
    }
  });
  var seconds = parseInt(document.body.getAttribute("data-refresh"), 10);
  if (!seconds) {
    return;
  }
  function refresh() {
    if (document.hidden) {
      return;
    }
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("main");
        if (fresh) {
          document.getElementById("main").replaceWith(fresh);
        }
      })
      .catch(function () {});
  }
  window.setInterval(refresh, seconds * 1000);
})();
