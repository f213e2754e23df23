// Outbox Relay console: the overview refreshes itself, forms marked
// data-confirm ask before they are sent, and a clipped error expands.
// Every page works without this.
"use strict";
(function () {
  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) {
      e.preventDefault();
    }
  });
  // A clipped error in the list shows whole on a click, or on Enter or
  // Space, and clips again on the next; selecting its text does not.
  function toggle(el) {
    var open = el.classList.toggle("open");
    el.setAttribute("aria-expanded", open ? "true" : "false");
  }
  document.addEventListener("click", function (e) {
    var el = e.target.closest && e.target.closest(".clip");
    if (el && !String(window.getSelection())) {
      toggle(el);
    }
  });
  document.addEventListener("keydown", function (e) {
    var el = e.target.closest && e.target.closest(".clip");
    if (el && (e.key === "Enter" || e.key === " ")) {
      e.preventDefault();
      toggle(el);
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
