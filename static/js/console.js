// Plinth console behaviours that live here rather than in the markup, because the
// Content-Security-Policy allows no inline handlers: a form with data-confirm asks before it
// submits, a select with data-autosubmit submits its form when changed, an input with
// data-select-on-click selects its value (to copy it), and a followed log stays scrolled to its
// newest line. Delegated from the document, so content that htmx swaps in later behaves the
// same. Written for Plinth; no library.
(function () {
  "use strict";

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form instanceof HTMLFormElement ? form.getAttribute("data-confirm") : null;
    if (question && !window.confirm(question)) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);

  document.addEventListener("change", function (event) {
    var field = event.target;
    if (!(field instanceof HTMLSelectElement) || !field.hasAttribute("data-autosubmit")) return;
    if (!field.form) return;
    if (field.form.requestSubmit) field.form.requestSubmit();
    else field.form.submit();
  });

  document.addEventListener("click", function (event) {
    var field = event.target;
    if (field instanceof HTMLInputElement && field.hasAttribute("data-select-on-click")) {
      field.select();
    }
  });

  // A followed log (a pane with data-follow) keeps its newest line in view as polls append
  // lines, unless the reader scrolled up to read; it keeps at most MAX_LOG_LINES lines.
  var MAX_LOG_LINES = 20000;
  var pinned = true;
  document.addEventListener("scroll", function (event) {
    var pane = event.target;
    if (pane instanceof HTMLElement && pane.id === "log-lines") {
      pinned = pane.scrollTop + pane.clientHeight >= pane.scrollHeight - 24;
    }
  }, true);
  function followLog() {
    var pane = document.getElementById("log-lines");
    if (!pane || !pane.hasAttribute("data-follow")) return;
    while (pane.children.length > MAX_LOG_LINES) pane.removeChild(pane.firstElementChild);
    if (pinned) pane.scrollTop = pane.scrollHeight;
  }
  document.addEventListener("htmx:oobAfterSwap", followLog);
  document.addEventListener("htmx:afterSettle", followLog);
  document.addEventListener("DOMContentLoaded", followLog);
})();
