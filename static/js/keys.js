// Plinth console, API keys page: fields that belong to one kind of key show for that kind only
// (an inference key has no role; a management key calls no endpoint), a ticked endpoint moves
// from the picker's results (searched on the server by htmx as one types) to the kept list, so a
// new search never drops it from the form, and a new key's snippets follow the chosen endpoint.
// Delegated from the document (the CSP allows no inline handlers). Written for Plinth; no library.
(function () {
  "use strict";

  function showKindFields(select) {
    document.querySelectorAll("[data-for-kind]").forEach(function (el) {
      el.hidden = el.getAttribute("data-for-kind") !== select.value;
    });
  }

  // Ticked: into the kept list (which htmx sends along, so the results leave it out); unticked
  // there: back to the top of the results, still in view. Focus follows the box it moved.
  function keepChoice(box) {
    var kept = document.getElementById("endpoint-chosen");
    var results = document.getElementById("endpoint-choices");
    var item = box.closest("li");
    if (!kept || !results || !item) return;
    if (box.checked && !kept.contains(item)) {
      kept.appendChild(item);
    } else if (!box.checked && kept.contains(item)) {
      results.insertBefore(item, results.firstChild);
    } else {
      return;
    }
    kept.hidden = kept.children.length === 0;
    results.hidden = results.children.length === 0;
    var none = document.getElementById("endpoint-none");
    if (none) none.hidden = results.children.length > 0;
    box.focus();
  }

  function showSnippets(select) {
    document.querySelectorAll("[data-snippets-for]").forEach(function (el) {
      el.hidden = el.getAttribute("data-snippets-for") !== select.value;
    });
  }

  document.addEventListener("change", function (event) {
    var el = event.target;
    if (el instanceof HTMLSelectElement && el.hasAttribute("data-key-kind")) showKindFields(el);
    if (el instanceof HTMLSelectElement && el.hasAttribute("data-snippet-picker")) showSnippets(el);
    if (el instanceof HTMLInputElement && el.type === "checkbox" && el.name === "endpoints") keepChoice(el);
  });

  // The search field must not submit the key form when Enter is pressed in it.
  document.addEventListener("keydown", function (event) {
    var el = event.target;
    if (event.key === "Enter" && el instanceof HTMLInputElement && el.hasAttribute("data-endpoint-search")) {
      event.preventDefault();
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    var kind = document.querySelector("[data-key-kind]");
    if (kind) showKindFields(kind);
  });
})();
