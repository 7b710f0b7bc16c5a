// Plinth console playground: a multi-turn chat through the console's proxy, each reply shown as
// it streams (Server-Sent Events read with fetch) with its TTFT, tokens/s and cached tokens; the
// exact request of the last message under "View code"; and a side-by-side mode that sends the
// same conversation to two targets (a canary's revision beside the serving one, pinned with
// X-Plinth-Revision, or another endpoint). The page keeps the conversation; each call carries
// the earlier turns. Written for Plinth; no library.
(function () {
  "use strict";

  // The earlier turns of each column's conversation ({role, content}), sent with each message.
  var conversations = { a: [], b: [] };

  function csrfToken() {
    try {
      return JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRFToken"];
    } catch (e) {
      return "";
    }
  }

  function byId(id) { return document.getElementById(id); }

  function setText(id, value) {
    var el = byId(id);
    if (el) el.textContent = value;
  }

  function compareChoice() {
    var select = byId("playground-compare");
    var option = select && select.selectedOptions[0];
    if (!option || !option.value) return null;
    var data = option.dataset;
    return {
      aRevision: data.aRevision || "", aLabel: data.aLabel || "",
      bRevision: data.bRevision || "", bLabel: data.bLabel || "", bUrl: data.bUrl,
    };
  }

  function showColumns() {
    var choice = compareChoice();
    var form = byId("playground-form");
    byId("playground-column-b").hidden = !choice;
    byId("playground-title-a").hidden = !choice;
    setText("playground-title-a", choice && choice.aLabel ? choice.aLabel : form.dataset.label);
    setText("playground-title-b", choice ? choice.bLabel : "");
    byId("playground-columns").classList.toggle("side-by-side", !!choice);
  }

  function clearConversation() {
    conversations = { a: [], b: [] };
    ["playground-output", "playground-output-b"].forEach(function (id) {
      var el = byId(id);
      el.textContent = "";
      el.removeAttribute("data-done");
    });
    ["stat-ttft", "stat-tps", "stat-tokens", "stat-cached"].forEach(function (id) { setText(id, "–"); });
    setText("playground-error", "");
  }

  function bubble(transcript, role, text) {
    var root = document.createElement("div");
    root.className = "msg msg-" + role;
    var who = document.createElement("span");
    who.className = "msg-role";
    who.textContent = role === "user" ? "You" : "Assistant";
    var body = document.createElement("div");
    body.className = "msg-text";
    body.textContent = text;
    root.append(who, body);
    transcript.append(root);
    return { root: root, who: who, text: body };
  }

  function handleEvent(data, state) {
    if (data === "[DONE]") return;
    var msg;
    try { msg = JSON.parse(data); } catch (e) { return; }
    if (msg.plinth) {
      if (msg.plinth.request) state.request = msg.plinth.request;
      if (msg.plinth.revision) state.reply.who.textContent = "Assistant · r" + msg.plinth.revision;
      return;
    }
    if (msg.error) {
      state.error = msg.error.message || "the call failed";
      return;
    }
    var choice = (msg.choices || [])[0];
    var delta = choice && choice.delta && choice.delta.content;
    if (delta) {
      if (state.first === null) state.first = performance.now();
      state.reply.text.textContent += delta;
      state.chunks += 1;
    }
    if (msg.usage) state.usage = msg.usage;
  }

  function figures(state) {
    var end = performance.now();
    var usage = state.usage || {};
    var tokens = usage.completion_tokens || state.chunks;
    var details = usage.prompt_tokens_details || {};
    var tps = null;
    if (state.first !== null && end > state.first && tokens > 1) {
      tps = ((tokens - 1) / ((end - state.first) / 1000)).toFixed(1);
    }
    return {
      ttft: state.first !== null ? Math.round(state.first - state.start) + " ms" : "–",
      tps: tps !== null ? tps : "–",
      tokens: String(tokens),
      cached: details.cached_tokens != null ? String(details.cached_tokens) : "–",
    };
  }

  function finish(state) {
    var transcript = state.transcript;
    if (state.error) {
      state.reply.root.classList.add("msg-error");
      state.reply.text.textContent = state.error;
    } else {
      var f = figures(state);
      var stats = document.createElement("p");
      stats.className = "msg-stats";
      stats.textContent = "TTFT " + f.ttft + " · " + f.tps + " tokens/s · " + f.tokens +
        " tokens · " + f.cached + " cached";
      state.reply.root.append(stats);
      if (state.primary) {
        setText("stat-ttft", f.ttft);
        setText("stat-tps", f.tps);
        setText("stat-tokens", f.tokens);
        setText("stat-cached", f.cached);
      }
    }
    transcript.setAttribute("data-done", "true");
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

  async function call(url, body, state) {
    try {
      var response = await fetch(url, {
        method: "POST",
        headers: { "X-CSRFToken": csrfToken() },
        body: body,
        credentials: "same-origin",
      });
      if (!response.ok) {
        var err = await response.json().catch(function () { return {}; });
        state.error = (err.error && err.error.message) || ("error " + response.status);
        return;
      }
      await readStream(response, state);
    } catch (e) {
      state.error = "the request failed: " + e;
    }
  }

  // --- "View code": the request exactly as the console sent it, as curl and openai-python ---

  function curlOf(request) {
    var lines = ["curl " + request.url + " \\"];
    Object.keys(request.headers).forEach(function (name) {
      lines.push('  -H "' + name + ": " + request.headers[name] + '" \\');
    });
    lines.push('  -H "Content-Type: application/json" \\');
    var json = JSON.stringify(request.body, null, 2).replace(/'/g, "'\\''");
    lines.push("  -d '" + json + "'");
    return lines.join("\n");
  }

  function pythonOf(request) {
    var body = request.body;
    var base = request.url.replace(/\/chat\/completions$/, "");
    var args = ["    model=" + JSON.stringify(body.model) + ","];
    args.push("    messages=" + JSON.stringify(body.messages, null, 4).replace(/\n/g, "\n    ") + ",");
    ["max_tokens", "temperature", "top_p"].forEach(function (name) {
      if (body[name] !== undefined) args.push("    " + name + "=" + body[name] + ",");
    });
    args.push("    stream=True,");
    args.push('    stream_options={"include_usage": True},');
    var pinned = Object.keys(request.headers).filter(function (h) { return h !== "Authorization"; });
    if (pinned.length) {
      var extra = pinned.map(function (h) { return JSON.stringify(h) + ": " + JSON.stringify(request.headers[h]); });
      args.push("    extra_headers={" + extra.join(", ") + "},");
    }
    return [
      "import os",
      "",
      "from openai import OpenAI",
      "",
      'client = OpenAI(base_url="' + base + '", api_key=os.environ["PLINTH_API_KEY"])',
      "stream = client.chat.completions.create(",
    ].concat(args, [
      ")",
      "for chunk in stream:",
      "    if chunk.choices:",
      '        print(chunk.choices[0].delta.content or "", end="")',
    ]).join("\n");
  }

  function showCode(states) {
    var shown = states.filter(function (s) { return s.request; });
    if (!shown.length) return;
    var several = shown.length > 1;
    setText("playground-code-curl", shown.map(function (s) {
      return (several ? "# " + s.label + "\n" : "") + curlOf(s.request);
    }).join("\n\n"));
    setText("playground-code-python", shown.map(function (s) {
      return (several ? "# " + s.label + "\n" : "") + pythonOf(s.request);
    }).join("\n\n"));
  }

  function requestBody(form, side, prompt) {
    var keyInput = byId("playground-key");
    var body = new URLSearchParams();
    body.set("key", keyInput ? keyInput.value : "");
    body.set("prompt", prompt);
    ["system", "temperature", "top_p", "max_tokens"].forEach(function (name) {
      body.set(name, form.elements[name].value);
    });
    body.set("history", JSON.stringify(conversations[side.id]));
    if (side.revision) body.set("revision", side.revision);
    return body;
  }

  async function send(form) {
    var button = byId("playground-send");
    var prompt = form.elements.prompt.value.trim();
    var choice = compareChoice();
    var sides = [{
      id: "a", url: form.dataset.url, revision: choice ? choice.aRevision : "",
      label: choice && choice.aLabel ? choice.aLabel : form.dataset.label,
      transcript: byId("playground-output"),
    }];
    if (choice) {
      sides.push({
        id: "b", url: choice.bUrl, revision: choice.bRevision, label: choice.bLabel,
        transcript: byId("playground-output-b"),
      });
    }
    setText("playground-error", "");
    button.disabled = true;
    var states = sides.map(function (side, index) {
      side.transcript.removeAttribute("data-done");
      var body = requestBody(form, side, prompt);
      bubble(side.transcript, "user", prompt);
      return {
        side: side, body: body, label: side.label, primary: index === 0,
        transcript: side.transcript, reply: bubble(side.transcript, "assistant", ""),
        start: performance.now(), first: null, chunks: 0, usage: null, error: null, request: null,
      };
    });
    await Promise.all(states.map(function (state) {
      return call(state.side.url, state.body, state).then(function () {
        finish(state);
        if (!state.error) {
          conversations[state.side.id].push(
            { role: "user", content: prompt },
            { role: "assistant", content: state.reply.text.textContent }
          );
        }
      });
    }));
    var errors = states.filter(function (s) { return s.error; }).map(function (s) {
      return (states.length > 1 ? s.label + ": " : "") + s.error;
    });
    setText("playground-error", errors.join(" · "));
    showCode(states);
    if (!errors.length) form.elements.prompt.value = "";
    button.disabled = false;
  }

  document.addEventListener("submit", function (event) {
    if (event.target && event.target.id === "playground-form") {
      event.preventDefault();
      send(event.target);
    }
  });

  document.addEventListener("change", function (event) {
    if (event.target && event.target.id === "playground-compare") {
      // Another target is another conversation: start both columns afresh.
      clearConversation();
      showColumns();
    }
  });

  document.addEventListener("click", function (event) {
    if (event.target && event.target.id === "playground-clear") clearConversation();
  });

  document.addEventListener("DOMContentLoaded", function () {
    if (byId("playground-form")) showColumns();
  });
})();
