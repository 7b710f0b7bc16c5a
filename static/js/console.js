// Plinth console behaviours that live here rather than in the markup, because the
// Content-Security-Policy allows no inline handlers: a form with data-confirm asks in a dialog
// before it submits, a select with data-autosubmit submits its form when changed, an input with
// data-select-on-click selects its value (to copy it), a button with data-copy copies one,
// and a followed log stays scrolled to its newest line. Delegated from the document, so content
// that htmx swaps in later behaves the same. Written for Plinth; no library.
(function () {
  "use strict";

  // A form with data-confirm="question" (and optionally data-confirm-title) asks in a modal
  // <dialog> rather than the browser's confirm(): it is styled, works the same on a phone,
  // names the action on its button, and keeps focus in the page. Cancel (or Escape) is the
  // first button, so a stray Enter does not stop an endpoint.
  var confirmed = new WeakSet();
  var pending = null;

  function confirmDialog() {
    var dialog = document.getElementById("confirm-dialog");
    if (dialog) return dialog;
    dialog = document.createElement("dialog");
    dialog.id = "confirm-dialog";
    dialog.className = "confirm";
    dialog.setAttribute("aria-labelledby", "confirm-dialog-title");
    dialog.setAttribute("aria-describedby", "confirm-dialog-question");
    var form = document.createElement("form");
    form.method = "dialog";
    var title = document.createElement("h2");
    title.id = "confirm-dialog-title";
    var question = document.createElement("p");
    question.id = "confirm-dialog-question";
    var buttons = document.createElement("div");
    buttons.className = "row";
    var no = document.createElement("button");
    no.value = "cancel";
    no.textContent = "Cancel";
    no.setAttribute("data-answer", "no");
    var yes = document.createElement("button");
    yes.value = "yes";
    yes.setAttribute("data-answer", "yes");
    buttons.append(no, yes);
    form.append(title, question, buttons);
    dialog.append(form);
    dialog.addEventListener("close", function () {
      var ask = pending;
      pending = null;
      if (!ask || dialog.returnValue !== "yes") return;
      confirmed.add(ask.form);
      if (ask.form.requestSubmit) ask.form.requestSubmit(ask.submitter || undefined);
      else ask.form.submit();
    });
    document.body.append(dialog);
    return dialog;
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form instanceof HTMLFormElement ? form.getAttribute("data-confirm") : null;
    if (!question) return;
    if (confirmed.has(form)) {
      confirmed.delete(form);
      return;
    }
    event.preventDefault();
    event.stopImmediatePropagation();
    var submitter = event.submitter || null;
    var dialog = confirmDialog();
    dialog.returnValue = "";
    dialog.querySelector("#confirm-dialog-title").textContent =
      form.getAttribute("data-confirm-title") || "Please confirm";
    dialog.querySelector("#confirm-dialog-question").textContent = question;
    var yes = dialog.querySelector("[data-answer=yes]");
    yes.textContent = (submitter && submitter.textContent.trim()) || "Confirm";
    yes.className = form.hasAttribute("data-confirm-danger") ? "danger" : "primary";
    pending = { form: form, submitter: submitter };
    dialog.showModal();
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

  // A button with data-copy="#input-id" copies that field's value (a new key, a URL) and says
  // so on itself. The Clipboard API needs a secure context; elsewhere the selection is copied.
  function copied(button, ok) {
    var label = button.getAttribute("data-label") || button.textContent;
    button.setAttribute("data-label", label);
    button.textContent = ok ? "Copied" : "Select and copy";
    button.setAttribute("data-copied", ok ? "true" : "false");
    setTimeout(function () { button.textContent = label; }, 2000);
  }
  document.addEventListener("click", function (event) {
    var button = event.target instanceof Element ? event.target.closest("[data-copy]") : null;
    if (!button) return;
    var field = document.querySelector(button.getAttribute("data-copy"));
    if (!field) return;
    var value = field.value !== undefined ? field.value : field.textContent;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(value).then(
        function () { copied(button, true); },
        function () { field.select(); copied(button, document.execCommand("copy")); }
      );
    } else {
      if (field.select) field.select();
      copied(button, document.execCommand("copy"));
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
