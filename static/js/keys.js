// Plinth console, API keys page: fields that belong to one kind of key show for that kind only
// (an inference key has no role; a management key calls no endpoint), the endpoint picker
// narrows its list as one types, and a new key's snippets follow the chosen endpoint.
// Delegated from the document (the CSP allows no inline handlers). Written for Plinth; no library.
(function () {
  "use strict";

  function showKindFields(select) {
    document.querySelectorAll("[data-for-kind]").forEach(function (el) {
      el.hidden = el.getAttribute("data-for-kind") !== select.value;
    });
  }

  function filterList(input) {
    var list = document.querySelector(input.getAttribute("data-filter-list"));
    if (!list) return;
    var words = input.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
    var shown = 0;
    list.querySelectorAll("[data-filter-text]").forEach(function (item) {
      var text = item.getAttribute("data-filter-text");
      // A ticked endpoint stays in view, so a search never hides what the key will be limited to.
      var ticked = item.querySelector("input:checked") !== null;
      var match = ticked || words.every(function (w) { return text.indexOf(w) !== -1; });
      item.hidden = !match;
      if (match) shown += 1;
    });
    var none = document.getElementById("endpoint-none");
    if (none) none.hidden = shown > 0;
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
  });

  document.addEventListener("input", function (event) {
    var el = event.target;
    if (el instanceof HTMLInputElement && el.hasAttribute("data-filter-list")) filterList(el);
  });

  // The search field must not submit the key form when Enter is pressed in it.
  document.addEventListener("keydown", function (event) {
    var el = event.target;
    if (event.key === "Enter" && el instanceof HTMLInputElement && el.hasAttribute("data-filter-list")) {
      event.preventDefault();
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    var kind = document.querySelector("[data-key-kind]");
    if (kind) showKindFields(kind);
  });
})();
