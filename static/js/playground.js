// Plinth console playground: send one chat prompt through the console's proxy and show the
// reply as it streams (Server-Sent Events read with fetch), with TTFT, tokens/s and cached
// tokens for the request. Written for Plinth; no library.
(function () {
  "use strict";

  function csrfToken() {
    try {
      return JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRFToken"];
    } catch (e) {
      return "";
    }
  }

  function setText(id, value) {
    var el = document.getElementById(id);
    if (el) el.textContent = value;
  }

  function handleEvent(data, state) {
    if (data === "[DONE]") return;
    var msg;
    try { msg = JSON.parse(data); } catch (e) { return; }
    if (msg.error) {
      setText("playground-error", msg.error.message || "the call failed");
      return;
    }
    var choice = (msg.choices || [])[0];
    var delta = choice && choice.delta && choice.delta.content;
    if (delta) {
      if (state.first === null) {
        state.first = performance.now();
        setText("stat-ttft", Math.round(state.first - state.start) + " ms");
      }
      state.output.textContent += delta;
      state.chunks += 1;
    }
    if (msg.usage) state.usage = msg.usage;
  }

  function finish(state) {
    var end = performance.now();
    var usage = state.usage || {};
    var tokens = usage.completion_tokens || state.chunks;
    setText("stat-tokens", String(tokens));
    var details = usage.prompt_tokens_details || {};
    setText("stat-cached", details.cached_tokens != null ? String(details.cached_tokens) : "–");
    if (state.first !== null && end > state.first && tokens > 1) {
      setText("stat-tps", ((tokens - 1) / ((end - state.first) / 1000)).toFixed(1));
    }
    state.output.setAttribute("data-done", "true");
  }

  async function readStream(response, state) {
    var reader = response.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    for (;;) {
      var part = await reader.read();
      if (part.done) break;
      buffer += decoder.decode(part.value, { stream: true });
      var events = buffer.split("\n\n");
      buffer = events.pop();
      events.forEach(function (block) {
        block.split("\n").forEach(function (line) {
          if (line.indexOf("data:") === 0) handleEvent(line.slice(5).trim(), state);
        });
      });
    }
  }

  async function send(form) {
    var keyInput = document.getElementById("playground-key");
    var output = document.getElementById("playground-output");
    var button = document.getElementById("playground-send");
    ["stat-ttft", "stat-tps", "stat-tokens", "stat-cached"].forEach(function (id) { setText(id, "–"); });
    setText("playground-error", "");
    output.textContent = "";
    output.removeAttribute("data-done");
    var body = new URLSearchParams();
    body.set("key", keyInput ? keyInput.value : "");
    body.set("prompt", form.elements.prompt.value);
    body.set("max_tokens", form.elements.max_tokens.value);
    var state = { start: performance.now(), first: null, chunks: 0, usage: null, output: output };
    button.disabled = true;
    try {
      var response = await fetch(form.dataset.url, {
        method: "POST",
        headers: { "X-CSRFToken": csrfToken() },
        body: body,
        credentials: "same-origin",
      });
      if (!response.ok) {
        var err = await response.json().catch(function () { return {}; });
        setText("playground-error", (err.error && err.error.message) || ("error " + response.status));
        return;
      }
      await readStream(response, state);
      finish(state);
    } catch (e) {
      setText("playground-error", "the request failed: " + e);
    } finally {
      button.disabled = false;
    }
  }

  document.addEventListener("submit", function (event) {
    if (event.target && event.target.id === "playground-form") {
      event.preventDefault();
      send(event.target);
    }
  });
})();
