// The fjord console: pages routed by the URL's fragment, built from the broker's /api/ answers.
// Every value from the cluster is put in the page as text (never as markup).
"use strict";

const main = document.getElementById("main");
let session = null;
let timers = [];

// ---- helpers ----

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

async function api(path, options) {
  const response = await fetch(path, Object.assign({ credentials: "same-origin" }, options));
  let body = {};
  try { body = await response.json(); } catch (e) { /* not JSON */ }
  if (response.status === 401 && session && session.login_required && path !== "/api/login") {
    session.user = null;
    renderWho();
    showLogin();
    throw new Error(body.error || "log in first");
  }
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function post(path, body) {
  return api(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Fjord-Console": "1" },
    body: JSON.stringify(body),
  });
}

const q = (params) => new URLSearchParams(params).toString();

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}
const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
const time = (ms) => (ms < 0 ? "–" : new Date(ms).toISOString());

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  const n = Number(ms);
  if (n < 0) return "forever";
  if (n % 86400000 === 0) return n / 86400000 + " d";
  if (n % 3600000 === 0) return n / 3600000 + " h";
  return num(n) + " ms";
}

function table(columns, rows, attrs) {
  return h("table", attrs || {},
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.num ? "num" : null }, c.title)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, columns.map((c) =>
      h("td", { class: [c.num ? "num" : c.mono ? "mono" : "", c.nowrap ? "nowrap" : ""].join(" ").trim() || null },
        c.cell(r)))))));
}

function errorBox(e) { return h("div", { class: "error", role: "alert" }, e.message || String(e)); }

function page(title, ...content) {
  main.replaceChildren(h("h1", {}, title), ...content);
}

function decode(field) {
  if (!field) return null;
  const raw = atob(field.base64);
  const data = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) data[i] = raw.charCodeAt(i);
  return { data, size: field.size };
}

// Shows bytes as text, pretty JSON or hex.
function render(field, format) {
  const d = decode(field);
  if (!d) return h("span", { class: "muted" }, "null");
  const cut = d.size > d.data.length ? " … (" + num(d.size) + " bytes)" : "";
  if (format === "hex") {
    return Array.from(d.data, (b) => b.toString(16).padStart(2, "0")).join(" ") + cut;
  }
  const text = new TextDecoder("utf-8", { fatal: false }).decode(d.data);
  if (format === "json") {
    try { return JSON.stringify(JSON.parse(text), null, 2) + cut; } catch (e) { /* not JSON */ }
  }
  return text + cut;
}

// ---- session ----

function renderWho() {
  const who = document.getElementById("who");
  const parts = [];
  if (session.read_only) parts.push(h("span", { class: "badge" }, "read-only"));
  parts.push(h("span", {}, "node " + session.node_id));
  if (session.user) {
    parts.push(h("span", { id: "user" }, session.user));
    parts.push(h("button", { onclick: async () => { await post("/api/logout", {}); location.reload(); } }, "Log out"));
  }
  who.replaceChildren(...parts);
}

function showLogin(message) {
  stopTimers();
  const status = h("div", {});
  if (message) status.append(errorBox(new Error(message)));
  const form = h("form", { class: "login", id: "login-form" },
    h("strong", {}, "Log in to the cluster"),
    h("label", {}, "Mechanism", h("select", { name: "mechanism" },
      session.mechanisms.map((m) => h("option", { value: m }, m)))),
    h("label", {}, "User", h("input", { name: "username", autocomplete: "username", required: true })),
    h("label", {}, "Password", h("input", { name: "password", type: "password", autocomplete: "current-password" })),
    h("button", { type: "submit" }, "Log in"),
    status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = Object.fromEntries(new FormData(form));
    try {
      const answer = await post("/api/login", data);
      session.user = answer.user;
      renderWho();
      route();
    } catch (e) {
      status.replaceChildren(errorBox(e));
    }
  });
  main.replaceChildren(form);
}

// ---- pages ----

function stopTimers() { timers.forEach(clearInterval); timers = []; }

async function overview() {
  const o = await api("/api/overview");
  const healthy = o.under_replicated === 0 && o.offline === 0 && !o.quorum.error;
  const card = (label, value, id) => h("div", { class: "card" },
    h("div", { class: "label" }, label), h("div", { class: "value", id }, value));
  const brokers = table([
    { title: "Id", cell: (b) => b.id },
    { title: "Listeners", cell: (b) => (b.listeners.error ? b.host + ":" + b.port
      : b.listeners.map((l) => h("div", {}, l))), mono: true, nowrap: true },
    { title: "Rack", cell: (b) => b.rack || "–", nowrap: true },
    { title: "Role", cell: (b) => (b.controller ? h("span", { class: "badge" }, "controller") : "") },
    { title: "Partitions", cell: (b) => num(b.partitions), num: true },
    { title: "Leaders", cell: (b) => num(b.leaders), num: true },
    { title: "Log dirs", cell: (b) => (b.log_dirs.error ? h("span", { class: "muted" }, b.log_dirs.error)
      : b.log_dirs.map((d) => h("div", {}, d.path + " — " + (d.error ? d.error
        : bytes(d.size_bytes) + " used, " + bytes(d.usable_bytes) + " free of " + bytes(d.total_bytes))))) },
  ], o.brokers, { id: "brokers" });
  const quorum = o.quorum.error ? h("p", { class: "muted" }, o.quorum.error) : h("dl", { class: "facts" },
    h("dt", {}, "Leader"), h("dd", { id: "quorum-leader" }, o.quorum.leader_id),
    h("dt", {}, "Epoch"), h("dd", {}, o.quorum.leader_epoch),
    h("dt", {}, "High watermark"), h("dd", {}, num(o.quorum.high_watermark)),
    h("dt", {}, "Voters"), h("dd", {}, o.quorum.voters.map((v) => v.id).join(", ")));
  const charts = h("div", { class: "charts" });
  page("Cluster " + o.cluster_id,
    h("div", { class: "cards" },
      card("Health", h("span", { class: "badge " + (healthy ? "ok" : "bad"), id: "health" }, healthy ? "healthy" : "degraded")),
      card("Brokers", o.brokers.length, "broker-count"),
      card("Topics", num(o.topics), "topic-count"),
      card("Partitions", num(o.partitions)),
      card("Under-replicated", num(o.under_replicated), "under-replicated"),
      card("Offline", num(o.offline)),
      card("Active controller", o.controller_id)),
    h("h2", {}, "Brokers"), brokers,
    h("h2", {}, "Metadata quorum"), quorum,
    h("h2", {}, "Throughput on node " + session.node_id), charts);
  startCharts(charts);
}

function startCharts(box) {
  const series = [
    { key: "bytes_in", title: "Bytes in / s", color: "#1f6feb", fmt: (v) => bytes(v) + "/s" },
    { key: "bytes_out", title: "Bytes out / s", color: "#8250df", fmt: (v) => bytes(v) + "/s" },
    { key: "messages_in", title: "Messages in / s", color: "#1a7f37", fmt: (v) => num(Math.round(v)) + "/s" },
  ];
  const points = { bytes_in: [], bytes_out: [], messages_in: [] };
  const views = series.map((s) => {
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("stroke", s.color);
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("viewBox", "0 0 300 90");
    svg.setAttribute("preserveAspectRatio", "none");
    svg.append(line);
    const now = h("span", { class: "muted" }, "");
    box.append(h("div", { class: "card chart" }, h("div", { class: "label" }, s.title, " ", now), svg));
    return { s, line, now };
  });
  let last = null;
  const tick = async () => {
    let t;
    try { t = await api("/api/throughput"); } catch (e) { return; }
    const at = performance.now();
    if (last) {
      const secs = (at - last.at) / 1000;
      for (const s of series) {
        points[s.key].push(Math.max(0, (t[s.key] - last.t[s.key]) / secs));
        if (points[s.key].length > 60) points[s.key].shift();
      }
    }
    last = { t, at };
    for (const v of views) {
      const p = points[v.s.key];
      const max = Math.max(1, ...p);
      // The samples so far fill the width; at most the last 60 (2 minutes) are kept.
      const step = 300 / Math.max(1, p.length - 1);
      v.line.setAttribute("points", p.map((y, i) => (i * step).toFixed(1) + "," + (88 - y / max * 84).toFixed(1)).join(" "));
      v.now.textContent = p.length ? v.s.fmt(p[p.length - 1]) : "";
    }
  };
  tick();
  timers.push(setInterval(tick, 2000));
}

async function topics() {
  const data = await api("/api/topics");
  const filter = h("input", { placeholder: "Filter topics", id: "topic-filter" });
  const body = h("div", {});
  const draw = () => {
    const f = filter.value.toLowerCase();
    body.replaceChildren(table([
      { title: "Topic", cell: (t) => h("a", { href: "#/topic/" + encodeURIComponent(t.name) }, t.name) },
      { title: "Partitions", cell: (t) => t.partitions, num: true },
      { title: "Replicas", cell: (t) => t.replication_factor, num: true },
      { title: "Under-replicated", cell: (t) => t.under_replicated, num: true },
      { title: "Messages", cell: (t) => num(t.messages), num: true },
      { title: "Size", cell: (t) => bytes(t.size_bytes), num: true },
      { title: "Retention", cell: (t) => duration(t.retention_ms) },
      { title: "Cleanup", cell: (t) => t.cleanup_policy || "–" },
    ], data.topics.filter((t) => t.name.toLowerCase().includes(f)), { id: "topics" }));
  };
  filter.addEventListener("input", draw);
  draw();
  page("Topics", h("div", { class: "toolbar" }, filter), body);
}

async function topicPage(name, tab) {
  const t = await api("/api/topic?" + q({ name }));
  const tabs = h("div", { class: "tabs" }, ["partitions", "configs", "messages"].map((k) =>
    h("a", { href: "#/topic/" + encodeURIComponent(name) + "/" + k, class: k === tab ? "active" : null, id: "tab-" + k },
      k[0].toUpperCase() + k.slice(1))));
  let content;
  if (tab === "configs") {
    content = t.configs.error ? errorBox(new Error(t.configs.error)) : table([
      { title: "Name", cell: (c) => c.name, mono: true },
      { title: "Value", cell: (c) => (c.sensitive ? "(sensitive)" : c.value === null ? "null" : c.value), mono: true },
      { title: "Source", cell: (c) => h("span", { class: c.source === "DEFAULT_CONFIG" ? "muted" : "badge" }, c.source) },
    ], t.configs, { id: "configs" });
  } else if (tab === "messages") {
    content = messageBrowser(t);
  } else {
    content = table([
      { title: "Partition", cell: (p) => p.partition, num: true },
      { title: "Leader", cell: (p) => (p.leader < 0 ? h("span", { class: "badge bad" }, "none") : p.leader) },
      { title: "Replicas", cell: (p) => p.replicas.join(", ") },
      { title: "ISR", cell: (p) => h("span", { class: p.isr.length < p.replicas.length ? "badge warn" : null }, p.isr.join(", ")) },
      { title: "Start offset", cell: (p) => num(p.start_offset), num: true },
      { title: "End offset", cell: (p) => num(p.end_offset), num: true },
      { title: "Size", cell: (p) => bytes(p.size_bytes), num: true },
    ], t.partitions, { id: "partitions" });
  }
  page("Topic " + name, h("p", { class: "muted" }, "id " + t.topic_id + (t.internal ? " · internal" : "")), tabs, content);
}

function messageBrowser(t) {
  const partition = h("select", { name: "partition", id: "msg-partition" },
    h("option", { value: "all" }, "all"), t.partitions.map((p) => h("option", { value: p.partition }, p.partition)));
  const from = h("select", { name: "from", id: "msg-from" },
    ["beginning", "end", "offset", "timestamp"].map((f) => h("option", { value: f }, f)));
  const offset = h("input", { name: "offset", id: "msg-offset", placeholder: "offset", size: 10 });
  const stamp = h("input", { name: "timestamp", id: "msg-timestamp", placeholder: "ms or 2026-01-31T12:00:00Z", size: 26 });
  const limit = h("input", { name: "limit", id: "msg-limit", value: "50", size: 4 });
  const format = h("select", { id: "msg-format" }, ["text", "json", "hex"].map((f) => h("option", { value: f }, f)));
  const search = h("input", { id: "msg-search", placeholder: "Search shown records" });
  const out = h("div", { id: "messages" });
  let records = [];
  const draw = () => {
    const f = search.value.toLowerCase();
    const fmt = format.value;
    const shown = records.filter((r) => !f || [r.key, r.value].some((x) => String(render(x, "text")).toLowerCase().includes(f))
      || r.headers.some((hd) => hd.key.toLowerCase().includes(f)));
    out.replaceChildren(h("p", { class: "muted", id: "msg-count" }, shown.length + " of " + records.length + " records"),
      table([
        { title: "Partition", cell: (r) => r.partition, num: true },
        { title: "Offset", cell: (r) => r.offset, num: true },
        { title: "Timestamp", cell: (r) => time(r.timestamp), mono: true },
        { title: "Key", cell: (r) => render(r.key, fmt), mono: true },
        { title: "Value", cell: (r) => render(r.value, fmt), mono: true },
        { title: "Headers", cell: (r) => r.headers.map((hd) => h("div", {}, hd.key + ": " + render(hd.value, fmt))), mono: true },
      ], shown, { id: "records" }));
  };
  const read = async () => {
    const params = { topic: t.name, partition: partition.value, from: from.value, limit: limit.value };
    if (from.value === "offset") params.offset = offset.value;
    if (from.value === "timestamp") {
      const v = stamp.value.trim();
      params.timestamp = /^\d+$/.test(v) ? v : String(Date.parse(v));
    }
    out.replaceChildren(h("p", { class: "muted" }, "Reading…"));
    try {
      records = (await api("/api/messages?" + q(params))).records;
      draw();
    } catch (e) { out.replaceChildren(errorBox(e)); }
  };
  search.addEventListener("input", draw);
  format.addEventListener("change", draw);
  return h("div", {},
    h("div", { class: "toolbar" },
      h("label", {}, "Partition", partition), h("label", {}, "From", from), h("label", {}, "Offset", offset),
      h("label", {}, "Timestamp", stamp), h("label", {}, "Limit", limit),
      h("button", { id: "msg-read", onclick: read }, "Read"),
      h("label", {}, "Show as", format), h("label", {}, "Search", search)),
    out);
}

async function groups() {
  const data = await api("/api/groups");
  page("Consumer groups", data.groups.length === 0 ? h("p", { class: "muted" }, "No groups.") : table([
    { title: "Group", cell: (g) => h("a", { href: "#/group/" + encodeURIComponent(g.id) }, g.id) },
    { title: "State", cell: (g) => h("span", { class: "badge" }, g.state || "–") },
    { title: "Protocol", cell: (g) => g.type || "classic" },
    { title: "Members", cell: (g) => num(g.members), num: true },
    { title: "Lag", cell: (g) => num(g.lag), num: true },
  ], data.groups, { id: "groups" }));
}

async function groupPage(id) {
  const g = await api("/api/group?" + q({ id }));
  const members = g.members.length === 0 ? h("p", { class: "muted" }, "No members.") : table([
    { title: "Member", cell: (m) => m.member_id, mono: true },
    { title: "Client id", cell: (m) => m.client_id },
    { title: "Host", cell: (m) => m.host },
    { title: "Assignment", cell: (m) => m.assignment.join(", "), mono: true },
  ], g.members, { id: "members" });
  const offsets = table([
    { title: "Topic", cell: (o) => o.topic },
    { title: "Partition", cell: (o) => o.partition, num: true },
    { title: "Committed", cell: (o) => num(o.committed), num: true },
    { title: "End offset", cell: (o) => num(o.end_offset), num: true },
    { title: "Lag", cell: (o) => num(o.lag), num: true },
    { title: "Consumer", cell: (o) => o.owner || "–" },
  ], g.offsets, { id: "offsets" });
  const topicsOf = [...new Set(g.offsets.map((o) => o.topic))];
  const topic = h("select", { id: "reset-topic" }, h("option", { value: "" }, "all topics"), topicsOf.map((t) => h("option", { value: t }, t)));
  const to = h("select", { id: "reset-to" }, ["earliest", "latest", "timestamp"].map((v) => h("option", { value: v }, v)));
  const stamp = h("input", { id: "reset-timestamp", placeholder: "ms or ISO time", size: 24 });
  const status = h("div", { id: "reset-status" });
  const reset = async () => {
    const body = { topic: topic.value, to: to.value };
    if (to.value === "timestamp") {
      const v = stamp.value.trim();
      body.timestamp = /^\d+$/.test(v) ? Number(v) : Date.parse(v);
    }
    try {
      await post("/api/group/reset?" + q({ id }), body);
      await groupPage(id);
    } catch (e) { status.replaceChildren(errorBox(e)); }
  };
  const resetBox = session.read_only
    ? h("p", { class: "muted" }, "Offset resets are off: the console is read-only (console.read.only).")
    : h("div", {}, h("div", { class: "toolbar" }, h("label", {}, "Topic", topic), h("label", {}, "Reset to", to),
      h("label", {}, "Timestamp", stamp), h("button", { id: "reset", onclick: reset }, "Reset offsets")),
    h("p", { class: "muted" }, "The group must have no members, as for kafka-consumer-groups --reset-offsets."), status);
  page("Group " + g.id,
    h("dl", { class: "facts" },
      h("dt", {}, "State"), h("dd", { id: "group-state" }, g.state),
      h("dt", {}, "Protocol"), h("dd", {}, g.type + (g.assignor ? " · " + g.assignor : "")),
      h("dt", {}, "Coordinator"), h("dd", {}, g.coordinator),
      h("dt", {}, "Total lag"), h("dd", { id: "total-lag" }, num(g.total_lag))),
    h("h2", {}, "Members"), members,
    h("h2", {}, "Offsets"), offsets,
    h("h2", {}, "Reset offsets"), resetBox);
}

async function quorum() {
  const qd = await api("/api/quorum");
  const replicas = (rows, id) => table([
    { title: "Node", cell: (r) => r.id + (r.id === qd.leader_id ? " (leader)" : "") },
    { title: "Log end offset", cell: (r) => num(r.log_end_offset), num: true },
    { title: "Lag", cell: (r) => num(r.lag), num: true },
    { title: "Last fetch", cell: (r) => time(r.last_fetch_timestamp), mono: true },
    { title: "Last caught up", cell: (r) => time(r.last_caught_up_timestamp), mono: true },
  ], rows, { id });
  page("Metadata quorum",
    h("dl", { class: "facts" },
      h("dt", {}, "Leader"), h("dd", { id: "quorum-leader" }, qd.leader_id),
      h("dt", {}, "Epoch"), h("dd", {}, qd.leader_epoch),
      h("dt", {}, "High watermark"), h("dd", {}, num(qd.high_watermark))),
    h("h2", {}, "Voters"), replicas(qd.voters, "voters"),
    h("h2", {}, "Observers"), qd.observers.length ? replicas(qd.observers, "observers") : h("p", { class: "muted" }, "None."));
}

async function security() {
  const [acls, users] = await Promise.allSettled([api("/api/acls"), api("/api/users")]);
  let aclBox;
  if (acls.status === "rejected") {
    aclBox = errorBox(acls.reason);
  } else {
    const filter = h("input", { placeholder: "Filter ACLs", id: "acl-filter" });
    const body = h("div", {});
    const draw = () => {
      const f = filter.value.toLowerCase();
      const shown = acls.value.acls.filter((a) => !f || Object.values(a).some((v) => String(v).toLowerCase().includes(f)));
      body.replaceChildren(shown.length === 0 ? h("p", { class: "muted" }, "No ACLs.") : table([
        { title: "Principal", cell: (a) => a.principal },
        { title: "Host", cell: (a) => a.host },
        { title: "Operation", cell: (a) => a.operation },
        { title: "Permission", cell: (a) => h("span", { class: "badge " + (a.permission === "DENY" ? "bad" : "ok") }, a.permission) },
        { title: "Resource", cell: (a) => a.resource_type },
        { title: "Name", cell: (a) => a.resource_name, mono: true },
        { title: "Pattern", cell: (a) => a.pattern_type },
      ], shown, { id: "acls" }));
    };
    filter.addEventListener("input", draw);
    draw();
    aclBox = h("div", {}, h("div", { class: "toolbar" }, filter), body);
  }
  const userBox = users.status === "rejected" ? errorBox(users.reason)
    : users.value.users.length === 0 ? h("p", { class: "muted" }, "No SCRAM users.") : table([
      { title: "User", cell: (u) => u.name },
      { title: "Credentials", cell: (u) => u.credentials.map((c) => c.mechanism + " (" + num(c.iterations) + " iterations)").join(", ") },
    ], users.value.users, { id: "users" });
  page("Security", h("h2", {}, "ACLs"), aclBox, h("h2", {}, "SCRAM users"), userBox);
}

// ---- routing ----

async function route() {
  stopTimers();
  if (session.login_required && !session.user) return showLogin();
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const name = parts[0] || "overview";
  for (const a of document.querySelectorAll("#nav a")) {
    const active = a.dataset.page === name || (a.dataset.page === "topics" && name === "topic")
      || (a.dataset.page === "groups" && name === "group");
    a.classList.toggle("active", active);
  }
  try {
    if (name === "topics") await topics();
    else if (name === "topic") await topicPage(parts[1], parts[2] || "partitions");
    else if (name === "groups") await groups();
    else if (name === "group") await groupPage(parts.slice(1).join("/"));
    else if (name === "quorum") await quorum();
    else if (name === "security") await security();
    else await overview();
  } catch (e) {
    if (!(session.login_required && !session.user)) main.replaceChildren(errorBox(e));
  }
}

(async () => {
  try {
    session = await api("/api/session");
  } catch (e) {
    main.replaceChildren(errorBox(e));
    return;
  }
  renderWho();
  window.addEventListener("hashchange", route);
  route();
})();
