// Live calls: asks for the calls that ended since the newest one shown, every second and a
// half, and puts them at the top of the table without reloading the page. Cells are filled
// as text, never as markup. Without scripts the page's refresh link does the same by hand.
"use strict";
(function () {
  var table = document.getElementById("calls");
  var status = document.getElementById("live-status");
  if (!table || !status) { return; }
  var body = table.tBodies[0];
  var last = Number(table.getAttribute("data-last") || "0");
  var limit = Number(table.getAttribute("data-limit") || "200");
  var columns = ["time", "team", "name", "upstream", "transport", "outcome", "latency", "trace"];

  function row(call) {
    var tr = document.createElement("tr");
    tr.setAttribute("data-seq", String(call.seq));
    tr.setAttribute("data-tool", call.name);
    columns.forEach(function (column) {
      var td = document.createElement("td");
      if (column === "outcome") {
        var span = document.createElement("span");
        span.className = "outcome outcome-" + call.outcome;
        span.textContent = call.outcome;
        td.appendChild(span);
      } else {
        td.textContent = String(call[column]);
      }
      if (column === "latency") { td.className = "num"; }
      if (column === "trace") { td.className = "trace"; }
      tr.appendChild(td);
    });
    return tr;
  }

  function show(calls) {
    // Newest first: insert from the oldest so that the newest ends on top.
    for (var i = calls.length - 1; i >= 0; i--) {
      body.insertBefore(row(calls[i]), body.firstChild);
      last = Math.max(last, calls[i].seq);
    }
    while (body.rows.length > limit) { body.deleteRow(body.rows.length - 1); }
    table.setAttribute("data-last", String(last));
    status.textContent = "live: updated at " + new Date().toLocaleTimeString();
  }

  function poll() {
    fetch("/console/calls.json?after=" + last, { credentials: "same-origin", redirect: "error" })
      .then(function (r) {
        if (!r.ok) { throw new Error("status " + r.status); }
        return r.json();
      })
      .then(function (page) { show(page.calls); })
      .catch(function () { status.textContent = "not updating: log in again, or reload the page"; })
      .then(function () { window.setTimeout(poll, 1500); });
  }
  window.setTimeout(poll, 1500);
})();
