// Live figures: poll the page's live URL every 2 s and write each value
// into the elements whose data-live attribute names it. Text only (never
// HTML), and nothing at all when the page has no live URL: every page
// works without this script.
(function () {
  "use strict";
  var main = document.querySelector("main[data-live-url]");
  if (!main || !window.fetch) {
    return;
  }
  var url = main.getAttribute("data-live-url");
  var status = document.getElementById("live-status");
  var failures = 0;
  function apply(values) {
    var els = document.querySelectorAll("[data-live]");
    for (var i = 0; i < els.length; i++) {
      var key = els[i].getAttribute("data-live");
      if (Object.prototype.hasOwnProperty.call(values, key) && els[i].textContent !== values[key]) {
        els[i].textContent = values[key];
        els[i].classList.add("changed");
      }
    }
  }
  function tick() {
    if (document.hidden) {
      setTimeout(tick, 2000);
      return;
    }
    fetch(url, {credentials: "same-origin", cache: "no-store"})
      .then(function (r) {
        if (!r.ok) {
          throw new Error("HTTP " + r.status);
        }
        return r.json();
      })
      .then(function (body) {
        failures = 0;
        apply(body.values || {});
        if (status) {
          // UTC and 24-hour, as every time the pages show.
          status.textContent = "Figures refreshed at " + new Date().toISOString().slice(11, 19) + " UTC.";
        }
      })
      .catch(function (err) {
        failures++;
        if (status) {
          status.textContent = "Live figures paused: " + err.message + " (retrying).";
        }
      })
      .then(function () {
        setTimeout(tick, Math.min(2000 * (1 + failures), 30000));
      });
  }
  setTimeout(tick, 2000);
})();
