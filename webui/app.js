// The chat page of `tessera serve`: plain ES modules, no build step.
// Conversations live on the server (/v1/conversations, SQLite); replies
// stream from /v1/chat/completions; the live panel reads /metrics.
import { renderMarkdown } from "./markdown.js";

const $ = (id) => document.getElementById(id);
const state = {
  conversation: null,   // {id, title, version, messages} or null (not saved yet)
  messages: [],         // [{role, content, stats?}]
  streaming: null,      // AbortController while a reply streams
  storage: true,        // false when the server keeps no conversations
};

// ---- the API --------------------------------------------------------------------

// The key from Settings, if given; else the browser's own credentials (the
// HTTP Basic login the server asked for) go with each call.
function headers() {
  const h = { "Content-Type": "application/json" };
  const key = localStorage.getItem("tessera.apiKey");
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function api(method, path, body) {
  const r = await fetch(path, { method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body) });
  const data = r.status === 204 ? null : await r.json().catch(() => null);
  if (!r.ok) {
    const err = new Error(data?.error?.message ?? `${method} ${path}: ${r.status}`);
    err.status = r.status;
    throw err;
  }
  return data;
}

function storageOff(err) {
  state.storage = false;
  const note = $("storage-note");
  note.hidden = false;
  note.textContent = `Conversations are not kept: ${err.message}`;
}

// ---- conversations ----------------------------------------------------------------

async function refreshList() {
  if (!state.storage) return;
  const q = $("search").value.trim();
  let list;
  try {
    list = await api("GET", `/v1/conversations${q ? `?q=${encodeURIComponent(q)}` : ""}`);
  } catch (err) {
    if (err.status === 503) return storageOff(err);
    throw err;
  }
  const ul = $("conversations");
  ul.replaceChildren();
  for (const c of list.data) {
    const li = document.createElement("li");
    if (state.conversation?.id === c.id) li.className = "current";
    const open = button(c.title || "Untitled", () => openConversation(c.id));
    open.className = "open";
    open.title = new Date(c.updated * 1000).toLocaleString();
    const rename = button("Rename", async () => {
      const title = prompt("Title", c.title);
      if (title === null) return;
      await api("PATCH", `/v1/conversations/${c.id}`, { title });
      refreshList();
    });
    const del = button("Delete", async () => {
      if (!confirm(`Delete "${c.title}"?`)) return;
      await api("DELETE", `/v1/conversations/${c.id}`);
      if (state.conversation?.id === c.id) newChat();
      refreshList();
    });
    rename.className = del.className = "small";
    li.append(open, rename, del);
    ul.append(li);
  }
}

async function openConversation(id) {
  const c = await api("GET", `/v1/conversations/${id}`);
  state.conversation = c;
  state.messages = c.messages.filter((m) => m.role !== "system");
  const sys = c.messages.find((m) => m.role === "system");
  $("system").value = sys ? sys.content : "";
  render();
  refreshList();
  if (window.matchMedia("(max-width: 700px)").matches) document.body.classList.remove("sidebar-open");
  $("input").focus();
}

function newChat() {
  stopStreaming();
  state.conversation = null;
  state.messages = [];
  render();
  refreshList();
  $("input").focus();
}

// Saves what changed: appends the new messages, or (after an edit or a
// regeneration) replaces them, naming the version read.
async function save(appended) {
  if (!state.storage) return;
  const toStore = (m) => ({ role: m.role, content: m.content, ...(m.stats ? { stats: m.stats } : {}),
                            ...(m.format ? { format: m.format } : {}), ...(m.tool_calls ? { tool_calls: m.tool_calls } : {}) });
  try {
    if (!state.conversation) {
      const first = state.messages.find((m) => m.role === "user");
      state.conversation = await api("POST", "/v1/conversations", {
        title: first ? first.content.slice(0, 60) : "New conversation",
        messages: systemMessages().concat(state.messages.map(toStore)),
      });
    } else if (appended) {
      state.conversation = await api("POST", `/v1/conversations/${state.conversation.id}/messages`,
                                     { messages: appended.map(toStore) });
    } else {
      state.conversation = await api("PUT", `/v1/conversations/${state.conversation.id}`, {
        messages: systemMessages().concat(state.messages.map(toStore)),
        version: state.conversation.version,
      });
    }
  } catch (err) {
    if (err.status === 503) return storageOff(err);
    if (err.status === 409) {  // another tab wrote first: show theirs
      alert("This conversation changed in another tab; reloading it.");
      return openConversation(state.conversation.id);
    }
    throw err;
  }
  refreshList();
}

function systemMessages() {
  const s = $("system").value.trim();
  return s ? [{ role: "system", content: s }] : [];
}

// ---- streaming a reply ---------------------------------------------------------------

async function generate() {
  const controller = new AbortController();
  state.streaming = controller;
  setBusy(true);
  const reply = { role: "assistant", content: "", stats: null, streaming: true };
  state.messages.push(reply);
  render();
  const started = performance.now();
  let first = 0, usage = null, finish = null;
  try {
    const body = {
      model: $("model").value || undefined,
      messages: systemMessages().concat(state.messages.filter((m) => m !== reply).map(({ role, content }) => ({ role, content }))),
      stream: true,
      stream_options: { include_usage: true },
      temperature: Number($("temperature").value),
      top_p: Number($("top-p").value),
      max_tokens: Number($("max-tokens").value),
    };
    if ($("soft-prompt").value) body.soft_prompt = $("soft-prompt").value;
    if ($("format").value === "json") {
      body.response_format = { type: "json_object" };
      reply.format = "json";
    }
    const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body),
                                                     signal: controller.signal });
    if (!r.ok) throw new Error((await r.json().catch(() => null))?.error?.message ?? `HTTP ${r.status}`);
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl).trim();
        buffer = buffer.slice(nl + 1);
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const chunk = JSON.parse(line.slice(6));
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices?.[0];
        if (!choice) continue;
        if (choice.finish_reason) finish = choice.finish_reason;
        const delta = choice.delta ?? {};
        if (delta.tool_calls) reply.tool_calls = (reply.tool_calls ?? []).concat(delta.tool_calls);
        if (delta.content) {
          if (!first) first = performance.now();
          reply.content += delta.content;
          updateStreaming(reply);
        }
      }
    }
  } catch (err) {
    if (err.name === "AbortError") {
      finish = "stopped";
    } else {
      reply.error = err.message;
    }
  } finally {
    const end = performance.now();
    const tokens = usage?.completion_tokens ?? null;
    reply.stats = {
      ttft_ms: first ? Math.round(first - started) : null,
      tokens_per_s: tokens && first && end > first ? +((tokens - 1) / ((end - first) / 1000)).toFixed(1) : null,
      tokens,
      finish,
    };
    delete reply.streaming;
    state.streaming = null;
    setBusy(false);
    render();
  }
  return reply;
}

function stopStreaming() {
  if (state.streaming) state.streaming.abort();
}

async function send(text) {
  const user = { role: "user", content: text };
  state.messages.push(user);
  const reply = await generate();
  await save(state.conversation ? [user, reply] : null);
}

async function regenerate() {
  if (state.messages.at(-1)?.role === "assistant") state.messages.pop();
  await generate();
  await save(null);
}

async function editAndResend(index) {
  const text = prompt("Edit your message", state.messages[index].content);
  if (text === null || !text.trim()) return;
  state.messages = state.messages.slice(0, index);
  state.messages.push({ role: "user", content: text });
  await generate();
  await save(null);
}

// ---- rendering ----------------------------------------------------------------------

function button(label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.addEventListener("click", onClick);
  return b;
}

function statsText(s) {
  if (!s) return "";
  const parts = [];
  if (s.ttft_ms !== null && s.ttft_ms !== undefined) parts.push(`first token ${s.ttft_ms} ms`);
  if (s.tokens_per_s) parts.push(`${s.tokens_per_s} tokens/s`);
  if (s.tokens) parts.push(`${s.tokens} tokens`);
  if (s.finish === "stopped") parts.push("stopped");
  else if (s.finish === "tool_calls") parts.push("tool call");
  return parts.join(" · ");
}

function messageBody(m) {
  const div = document.createElement("div");
  div.className = "body";
  if (m.role === "assistant" && m.format === "json" && !m.streaming) {
    // Structured output: shown as the JSON it is, pretty-printed when it parses.
    const label = document.createElement("div");
    label.className = "label";
    label.textContent = "JSON (structured output)";
    const pre = document.createElement("pre");
    pre.className = "json";
    try {
      pre.textContent = JSON.stringify(JSON.parse(m.content), null, 2);
    } catch {
      pre.textContent = m.content;
    }
    div.append(label, pre);
  } else if (m.role === "assistant") {
    div.innerHTML = renderMarkdown(m.content);
    if (m.tool_calls) {
      const pre = document.createElement("pre");
      pre.className = "tool-call";
      pre.textContent = `tool call: ${JSON.stringify(m.tool_calls, null, 2)}`;
      div.append(pre);
    }
    if (m.error) {
      const p = document.createElement("p");
      p.className = "error";
      p.textContent = m.error;
      div.append(p);
    }
  } else {
    div.textContent = m.content;
  }
  return div;
}

function render() {
  const ol = $("messages");
  ol.replaceChildren();
  state.messages.forEach((m, i) => {
    const li = document.createElement("li");
    li.className = m.role;
    if (m.streaming) li.classList.add("streaming");
    const who = document.createElement("div");
    who.className = "role";
    who.textContent = m.role === "user" ? "You" : "Model";
    li.append(who, messageBody(m));
    const tools = document.createElement("div");
    tools.className = "tools";
    if (!m.streaming) {
      tools.append(button("Copy", () => navigator.clipboard?.writeText(m.content)));
      if (m.role === "user") tools.append(button("Edit", () => editAndResend(i)));
      if (m.role === "assistant" && i === state.messages.length - 1) tools.append(button("Regenerate", regenerate));
      const st = document.createElement("span");
      st.className = "stats";
      st.textContent = statsText(m.stats);
      tools.append(st);
    }
    li.append(tools);
    ol.append(li);
  });
  ol.lastElementChild?.scrollIntoView({ block: "end" });
}

function updateStreaming(m) {
  const li = $("messages").lastElementChild;
  if (!li) return;
  li.querySelector(".body").replaceWith(messageBody(m));
  li.scrollIntoView({ block: "end" });
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  $("input").disabled = false;
}

// ---- live panel -----------------------------------------------------------------------

let lastTokens = null, lastTime = 0;
async function pollMetrics() {
  try {
    const text = await (await fetch("/metrics")).text();
    const value = (name) => {
      const m = text.match(new RegExp(`^${name} ([0-9.e+-]+)$`, "m"));
      return m ? Number(m[1]) : 0;
    };
    const now = performance.now();
    const tokens = value("tessera_generation_tokens_total");
    const rate = lastTokens === null ? 0 : ((tokens - lastTokens) * 1000) / (now - lastTime);
    lastTokens = tokens;
    lastTime = now;
    $("live").textContent =
      `running ${value("tessera_num_requests_running")} · waiting ${value("tessera_num_requests_waiting")} · ` +
      `KV ${value("tessera_kv_blocks_used")}/${value("tessera_kv_blocks_total")} · ${rate.toFixed(1)} tok/s`;
  } catch {
    $("live").textContent = "metrics unavailable";
  }
}

async function loadModels() {
  try {
    const soft = await api("GET", "/v1/soft_prompts").catch(() => ({ data: [] }));
    const sp = $("soft-prompt");
    sp.replaceChildren(new Option("none", ""));
    for (const p of soft.data) sp.append(new Option(p.id, p.id));
    const models = await api("GET", "/v1/models");
    const select = $("model");
    select.replaceChildren();
    for (const m of models.data) {
      const o = document.createElement("option");
      o.value = m.id;
      o.textContent = m.parent ? `${m.id} (adapter)` : m.id;
      select.append(o);
    }
    $("model-name").textContent = models.data[0]?.id ?? "";
  } catch (err) {
    $("model-name").textContent = err.status === 401 ? "API key needed (Settings)" : err.message;
  }
}

// ---- wiring -----------------------------------------------------------------------------

function init() {
  $("api-key").value = localStorage.getItem("tessera.apiKey") ?? "";
  $("api-key").addEventListener("change", () => {
    localStorage.setItem("tessera.apiKey", $("api-key").value);
    state.storage = true;
    $("storage-note").hidden = true;
    loadModels();
    refreshList();
  });
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("input").value.trim();
    if (!text || state.streaming) return;
    $("input").value = "";
    send(text);
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") stopStreaming(); });
  $("stop").addEventListener("click", stopStreaming);
  $("new-chat").addEventListener("click", newChat);
  $("search").addEventListener("input", () => refreshList());
  $("toggle-settings").addEventListener("click", () => {
    const s = $("settings");
    s.hidden = !s.hidden;
    $("toggle-settings").setAttribute("aria-expanded", String(!s.hidden));
  });
  $("toggle-sidebar").addEventListener("click", () => document.body.classList.toggle("sidebar-open"));
  $("export").addEventListener("click", async () => {
    const data = await api("GET", "/v1/conversations/export");
    const a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)], { type: "application/json" }));
    a.download = "tessera-conversations.json";
    a.click();
  });
  $("import-file").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (!file) return;
    await api("POST", "/v1/conversations/import", JSON.parse(await file.text()));
    refreshList();
  });
  loadModels();
  refreshList().catch((err) => storageOff(err));
  pollMetrics();
  setInterval(pollMetrics, 2000);
  $("input").focus();
}

init();
