// Reloads the page it is included in every few seconds; the page's refresh link does the
// same by hand when scripts are off.
"use strict";
(function () {
  var seconds = Number(document.body.getAttribute("data-refresh") || "0");
  if (seconds > 0) {
    window.setTimeout(function () { window.location.reload(); }, seconds * 1000);
  }
})();
