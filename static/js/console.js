// Plinth console behaviours that live here rather than in the markup, because the
// Content-Security-Policy allows no inline handlers: a form with data-confirm asks before it
// submits, a select with data-autosubmit submits its form when changed, and an input with
// data-select-on-click selects its value (to copy it). Delegated from the document, so content
// that htmx swaps in later behaves the same. Written for Plinth; no library.
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
})();
