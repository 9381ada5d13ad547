/*
 * Times in the reader's own time zone: every <time data-local-time datetime=…> the server
 * wrote in UTC is rewritten in local time, also in fragments htmx swaps in later.
 */
(function () {
  "use strict";

  var format = new Intl.DateTimeFormat(undefined, {
    day: "numeric",
    month: "short",
    year: "numeric",
    hour: "2-digit",
    minute: "2-digit",
  });

  // data-local-time="clock": the time of day alone, to the second (today's events).
  var clock = new Intl.DateTimeFormat(undefined, {
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
  });

  function localize(scope) {
    var times = scope.querySelectorAll("time[data-local-time]");
    for (var i = 0; i < times.length; i++) {
      var when = new Date(times[i].getAttribute("datetime"));
      if (!isNaN(when)) {
        var chosen = times[i].getAttribute("data-local-time") === "clock" ? clock : format;
        times[i].textContent = chosen.format(when);
        times[i].title = when.toISOString();
      }
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    localize(document);
  });
  document.addEventListener("htmx:afterSettle", function (event) {
    localize(event.target);
  });
})();
