// Ferry console: applies the server's view ("full") and its diffs (server-sent events) to the page.
// Plain DOM and canvas; each panel is redrawn only when its part of the view changed.
"use strict";

// firstPaintMs: after navigation start; fullMs: each whole view's handling (the first, or after a
// stall); applyMs: each update's; seen: move key -> when it was first drawn complete (Date.now());
// moveToPageMs: that minus the move's t6 (same host clock)
const stats = { firstPaintMs: null, updates: 0, fullMs: [], applyMs: [], seen: {}, moveToPageMs: [] };
window.ferryStats = stats;
window.ferryView = () => view;
let view = null;
let secure = false;
const COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const moved = new Map(); // "topic/p" -> time (ms) it last changed owner: outlined for a while
const MOVED_OUTLINE_MS = 3000;
let layout = null; // partition map geometry

function $(id) { return document.getElementById(id); }
function esc(s) { return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]); }
function fmt(v, digits) { return v === null || v === undefined ? "–" : Number(v).toFixed(digits || 0); }
function brokerColor(id) { return id < 0 ? "#3a3a3a" : COLORS[((id % COLORS.length) + COLORS.length) % COLORS.length]; }

// -- panels
function renderBrokers() {
  const rows = view.brokers.map(b => `<tr data-broker="${b.id}"><td>${b.id}</td><td class="state-${esc(b.state)}">${esc(b.state)}</td>` +
    `<td class="num">${b.leads}</td><td class="num">${fmt(b.records_per_s)}</td><td class="num">${fmt(b.bytes_per_s / 1024, 1)}</td>` +
    `<td class="num">${fmt(b.latency_ms, 2)}</td></tr>`);
  $("brokers").tBodies[0].innerHTML = rows.join("");
  const maxRate = Math.max(1, ...view.brokers.map(b => b.records_per_s));
  $("legend").innerHTML = view.brokers.map(b => `<span><i style="background:${brokerColor(b.id)};opacity:${0.45 + 0.55 * b.records_per_s / maxRate}"></i>broker ${b.id}: ${b.leads} partitions, ${fmt(b.records_per_s)} rec/s</span>`).join("") +
    `<span><i style="background:#3a3a3a"></i>no leader</span>`;
}

function renderQuorum() {
  const q = view.quorum;
  $("quorum-summary").textContent = q.leader_id === null ? "no leader answered" : `leader ${q.leader_id}, term ${q.term}, high watermark ${q.high_watermark}`;
  $("quorum").tBodies[0].innerHTML = q.nodes.map(n => n.up
    ? `<tr><td>${n.id}</td><td>${n.leader ? "leader" : "follower"}</td><td class="num">${fmt(n.term)}</td><td class="num">${fmt(n.image_offset)}</td>` +
      `<td class="num">${fmt(n.lag)}</td><td class="num">${fmt(n.queue_depth)}</td><td class="num">${fmt(n.loop_lag_max_ms)}</td></tr>`
    : `<tr><td>${n.id}</td><td class="state-dead">down</td><td></td><td></td><td></td><td></td><td></td></tr>`).join("");
}

function renderTopics() {
  $("topics").tBodies[0].innerHTML = view.topics.map(t => {
    const groups = Object.entries(t.groups || {}).map(([g, lag]) => `${esc(g)} (${lag})`).join(", ");
    return `<tr><td>${esc(t.name)}</td><td class="num">${t.partitions}</td><td>${groups || '<span class="dim">–</span>'}</td></tr>`;
  }).join("");
}

function renderMoves() {
  const now = Date.now();
  const seen = {};
  const rows = view.moves.map(m => {
    if (m.complete) {
      if (!(m.key in stats.seen) && m.done_ms) { stats.moveToPageMs.push(now - m.done_ms); if (stats.moveToPageMs.length > 5000) stats.moveToPageMs.shift(); }
      seen[m.key] = stats.seen[m.key] || now;
    }
    const total = Math.max(1, m.steps_ms.reduce((a, v) => a + (v || 0), 0));
    const bar = m.steps_ms.map((v, i) => `<i class="s${i + 1}" style="width:${(100 * (v || 0) / total).toFixed(1)}%" title="step ${i + 1}: ${fmt(v)} ms"></i>`).join("");
    const when = m.done_ms ? new Date(m.done_ms).toLocaleTimeString() : "in progress";
    const fresh = m.done_ms && now - m.done_ms < 5000 ? " fresh" : "";
    return `<tr class="move${fresh}" data-key="${esc(m.key)}" data-topic="${esc(m.topic)}" data-partition="${m.partition}" data-to="${m.to}" data-complete="${m.complete}">` +
      `<td>${esc(m.topic)}/${m.partition}</td><td>${m.from} → ${m.to}</td><td><div class="bar">${bar}</div></td>` +
      `<td class="num">${fmt(m.total_ms)}</td><td class="num">${fmt(m.gap_ms)}</td><td>${when}${m.clean ? "" : " (unclean)"}</td></tr>`;
  });
  stats.seen = seen; // only the moves shown: the map does not grow with every move ever made
  $("moves").tBodies[0].innerHTML = rows.join("") || '<tr><td colspan="6" class="dim">no moves yet</td></tr>';
}

// -- an autoscaling experiment: the panels of its overview.png and balance.png, redrawn as it runs
const EVENT_COLORS = { add_brokers: "#59a14f", rebalance_start: "#b07aa1", set_rate: "#8a98a8", remove_broker: "#e15759" };
const RUN_PANELS = [
  ["records/s", r => [["offered", r.series.offered_rps, "#8a98a8"], ["acknowledged", r.series.achieved_rps, "#4e79a7"], ["consumed", r.series.consumed_rps, "#76b7b2"]]],
  ["acks/s per broker", r => Object.entries(r.per_broker).map(([b, v]) => ["broker " + b, v, brokerColor(Number(b))])],
  ["produce latency ms (log)", r => [["p50", r.series.p50_ms, "#4e79a7"], ["p99", r.series.p99_ms, "#f28e2b"]], { log: true }],
  ["consumer lag (records)", r => [["lag", r.series.consumer_lag, "#9c755f"]]],
  ["live brokers, failed records, retries", r => [["live brokers", r.series.brokers, "#dde3ea", "step"], ["failed", r.series.errors, "#e15759", "bar"], ["retries", r.series.retries, "#f28e2b", "bar"]]],
  ["per-broker throughput max/mean (3 s)", r => [["max/mean", r.balance, "#4e79a7"]], { hline: "balance_threshold" }],
  ["live brokers, moves seen", r => [["live brokers", r.series.brokers, "#dde3ea", "step"], ["moves", r.series.moves, "#f28e2b", "bar"]]],
];

function drawRunChart(canvas, run, lines, opts) {
  const g = canvas.getContext("2d"), w = canvas.width, h = canvas.height, t = run.series.t_s;
  g.clearRect(0, 0, w, h);
  if (t.length < 2) return;
  const t0 = t[0], dt = Math.max(1, t[t.length - 1] - t0);
  const f = v => opts.log ? Math.log10(Math.max(v, 0.01)) : v;
  let lo = opts.log ? Infinity : 0, hi = -Infinity;
  for (const [, vals] of lines) for (const v of vals) if (v !== null) { lo = Math.min(lo, f(v)); hi = Math.max(hi, f(v)); }
  if (opts.hline) hi = Math.max(hi, run[opts.hline]);
  if (!isFinite(hi)) return;
  if (hi <= lo) hi = lo + 1;
  const X = s => 2 + (s - t0) / dt * (w - 4), Y = v => h - 3 - (f(v) - lo) / (hi - lo) * (h - 8);
  for (const e of run.events) {
    if (e.kind === "move") { g.fillStyle = "#f28e2b"; g.fillRect(X(e.t_s), h - 6, 1, 6); continue; }
    g.strokeStyle = EVENT_COLORS[e.kind] || "#8a98a8"; g.setLineDash([4, 3]); g.beginPath(); g.moveTo(X(e.t_s), 0); g.lineTo(X(e.t_s), h); g.stroke();
  }
  if (opts.hline) { g.strokeStyle = "#59a14f"; g.setLineDash([1, 3]); g.beginPath(); g.moveTo(0, Y(run[opts.hline])); g.lineTo(w, Y(run[opts.hline])); g.stroke(); }
  g.setLineDash([]);
  for (const [, vals, color, kind] of lines) {
    g.strokeStyle = g.fillStyle = color; g.beginPath();
    let started = false;
    vals.forEach((v, i) => {
      if (v === null) { started = false; return; }
      if (kind === "bar") { if (v > 0) g.fillRect(X(t[i]) - 1, Y(v), 2, h - 3 - Y(v)); return; }
      const x = X(t[i]), y = Y(v);
      if (!started) { g.moveTo(x, y); started = true; } else if (kind === "step") { g.lineTo(x, g.__y); g.lineTo(x, y); } else g.lineTo(x, y);
      g.__y = y;
    });
    g.stroke();
  }
}

function renderRuns() {
  const run = view.run;
  $("runs-panel").hidden = !run;
  if (!run) return;
  $("run-name").textContent = `${run.name}: ${run.series.t_s.length} s` ;
  $("run-legend").innerHTML = Object.entries(EVENT_COLORS).map(([k, c]) => `<span style="color:${c}">┆ ${esc(k)}</span>`).join(" ") + ' <span style="color:#f28e2b">▮ move</span>';
  const box = $("run-charts");
  RUN_PANELS.forEach(([title, pick, opts], i) => {
    let fig = box.children[i];
    if (!fig) {
      fig = document.createElement("figure");
      fig.innerHTML = `<figcaption></figcaption><canvas width="400" height="110"></canvas>`;
      box.appendChild(fig);
    }
    const lines = pick(run), canvas = fig.querySelector("canvas");
    if (canvas.width !== Math.max(200, fig.clientWidth)) canvas.width = Math.max(200, fig.clientWidth);
    fig.querySelector("figcaption").textContent = title + ": " + lines.map(([n, v]) => `${n} ${fmt(v.length ? v[v.length - 1] : null, 1)}`).join(", ");
    drawRunChart(canvas, run, lines, opts || {});
  });
}

function renderCharts() {
  const box = $("charts");
  for (const [bid, points] of Object.entries(view.series)) {
    let fig = box.querySelector(`figure[data-broker="${bid}"]`);
    if (!fig) {
      fig = document.createElement("figure");
      fig.dataset.broker = bid;
      fig.innerHTML = `<canvas width="300" height="90"></canvas><figcaption></figcaption>`;
      box.appendChild(fig);
    }
    const last = points[points.length - 1] || [0, 0, 0, 0];
    fig.querySelector("figcaption").textContent = `broker ${bid}: ${fmt(last[1])} records/s, ${fmt(last[3], 2)} ms`;
    const c = fig.querySelector("canvas"), g = c.getContext("2d");
    g.clearRect(0, 0, c.width, c.height);
    if (points.length < 2) continue;
    const t0 = points[0][0], t1 = points[points.length - 1][0], dt = Math.max(1, t1 - t0);
    const line = (idx, dash) => {
      const max = Math.max(1e-9, ...points.map(p => p[idx]));
      g.setLineDash(dash); g.strokeStyle = brokerColor(Number(bid)); g.beginPath();
      points.forEach((p, i) => { const x = (p[0] - t0) / dt * (c.width - 2) + 1, y = c.height - 2 - p[idx] / max * (c.height - 6); i ? g.lineTo(x, y) : g.moveTo(x, y); });
      g.stroke();
    };
    line(1, []); line(3, [3, 3]);
  }
}

// -- the partition map: one cell per partition, the owner's colour; moved cells outlined
function computeLayout() {
  const canvas = $("map");
  const width = Math.max(300, canvas.parentElement.clientWidth - 4);
  const topics = Object.keys(view.partitions);
  const total = topics.reduce((a, t) => a + view.partitions[t].length, 0);
  const cell = Math.max(4, Math.min(18, Math.floor(Math.sqrt(width * 420 / Math.max(1, total)))));
  const cols = Math.max(1, Math.floor(width / cell));
  const labelH = 14;
  let y = 0;
  const places = {};
  for (const t of topics) {
    const n = view.partitions[t].length;
    places[t] = { y: y + labelH, n };
    y += labelH + Math.ceil(n / cols) * cell + 4;
  }
  layout = { cell, cols, places, width, height: Math.max(20, y) };
  canvas.width = width; canvas.height = layout.height;
  $("map-count").textContent = `(${total} partitions in ${topics.length} topics)`;
}

function drawCell(g, topic, p, leader, now) {
  const pl = layout.places[topic], c = layout.cell;
  const x = (p % layout.cols) * c, y = pl.y + Math.floor(p / layout.cols) * c;
  g.fillStyle = brokerColor(leader);
  g.fillRect(x, y, c - 1, c - 1);
  const t = moved.get(topic + "/" + p);
  if (t !== undefined && now - t < MOVED_OUTLINE_MS) { g.strokeStyle = "#ffffff"; g.lineWidth = 1; g.strokeRect(x + 0.5, y + 0.5, c - 2, c - 2); }
}

function drawMap() {
  computeLayout();
  const g = $("map").getContext("2d"), now = Date.now();
  g.clearRect(0, 0, layout.width, layout.height);
  g.font = "11px system-ui"; g.fillStyle = "#8a98a8";
  for (const [t, leaders] of Object.entries(view.partitions)) {
    g.fillStyle = "#8a98a8"; g.fillText(t, 0, layout.places[t].y - 3);
    for (let p = 0; p < leaders.length; p++) drawCell(g, t, p, leaders[p], now);
  }
}

function hoverMap(ev, pick) {
  if (!layout || !view) return;
  const r = $("map").getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
  for (const [t, pl] of Object.entries(layout.places)) {
    const row = Math.floor((y - pl.y) / layout.cell), col = Math.floor(x / layout.cell), p = row * layout.cols + col;
    if (y >= pl.y && row >= 0 && col < layout.cols && p < pl.n) {
      $("map-tip").textContent = `${t}/${p}: leader ${view.partitions[t][p]}`;
      if (pick) { $("move-topic").value = t; $("move-partition").value = p; }
      return;
    }
  }
}

// -- applying the server's messages
function renderAll() {
  renderBrokers(); renderQuorum(); renderTopics(); renderMoves(); renderCharts(); renderRuns(); drawMap();
}

function apply(update) {
  if (update.full) { view = update.full; renderAll(); return; }
  if (!view) return;
  const now = Date.now();
  let relayout = false;
  for (const k of ["brokers", "topics", "moves", "quorum", "series", "run"]) if (k in update) view[k] = update[k];
  if (update.topics_set) { Object.assign(view.partitions, update.topics_set); relayout = true; }
  if (update.topics_gone) { for (const t of update.topics_gone) delete view.partitions[t]; relayout = true; }
  if ("brokers" in update) renderBrokers();
  if ("quorum" in update) renderQuorum();
  if ("topics" in update) renderTopics();
  if ("moves" in update) renderMoves();
  if ("series" in update) renderCharts();
  if ("run" in update) renderRuns();
  const g = $("map").getContext("2d");
  for (const [t, pairs] of Object.entries(update.leaders || {})) {
    const leaders = view.partitions[t];
    if (!leaders) continue;
    for (const [p, leader] of pairs) {
      leaders[p] = leader; moved.set(t + "/" + p, now);
      if (!relayout) drawCell(g, t, p, leader, now);
    }
  }
  if (relayout) drawMap();
  for (const [key, t] of moved) {  // an outline that has had its time: the cell drawn plain again
    if (now - t <= MOVED_OUTLINE_MS) continue;
    moved.delete(key);
    const i = key.lastIndexOf("/"), topic = key.slice(0, i), p = Number(key.slice(i + 1)), leaders = view.partitions[topic];
    if (leaders && layout && layout.places[topic] && p < leaders.length) drawCell(g, topic, p, leaders[p], now);
  }
  if (update.at_ms) $("clock").textContent = new Date(update.at_ms).toLocaleTimeString();
}

function onMessage(ev) {
  const t0 = performance.now();
  const update = JSON.parse(ev.data);
  apply(update);
  const dt = performance.now() - t0, into = update.full ? stats.fullMs : stats.applyMs;
  stats.updates += 1;
  into.push(dt);
  if (into.length > 2000) into.shift();
  if (stats.firstPaintMs === null && view) requestAnimationFrame(() => { stats.firstPaintMs = performance.now(); });
}

function connect() {
  const es = new EventSource("/api/events");
  es.addEventListener("hello", ev => {
    const hello = JSON.parse(ev.data);
    secure = hello.secure;
    $("token-label").hidden = !secure;
    $("status").textContent = "live"; $("status").className = "status live";
  });
  es.onmessage = ev => {
    const data = JSON.parse(ev.data);
    if ("error" in data && Object.keys(data).length === 1) {
      $("status").textContent = data.error ? "cluster unreachable: " + data.error : "live";
      $("status").className = data.error ? "status down" : "status live";
      return;
    }
    onMessage(ev);
  };
  es.onerror = () => { $("status").textContent = "console unreachable, retrying"; $("status").className = "status down"; };
}

// -- the move form: confirm, post, show the controller's answer
function formValues() {
  return { topic: $("move-topic").value.trim(), partition: $("move-partition").value.trim(), replicas: $("move-replicas").value.trim() };
}

$("move-form").addEventListener("submit", ev => {
  ev.preventDefault();
  const v = formValues();
  $("move-question").textContent = `Move ${v.topic}/${v.partition} to replicas [${v.replicas}]?`;
  $("move-confirm").hidden = false;
});
$("move-no").addEventListener("click", () => { $("move-confirm").hidden = true; });

// post to the console; the answer's Kafka error (name: message) or what `ok` makes of it
async function post(path, payload, result, ok) {
  const headers = { "Content-Type": "application/json" };
  if (secure && $("move-token").value) headers.Authorization = "Bearer " + $("move-token").value;
  result.className = "dim"; result.textContent = "sending…";
  try {
    const r = await fetch(path, { method: "POST", headers, body: JSON.stringify(payload) });
    const body = await r.json();
    if (body.error && body.error !== "NONE") { result.className = "error"; result.textContent = `${body.error}: ${body.message}`; }
    else { result.className = "ok"; result.textContent = ok(body); }
  } catch (e) { result.className = "error"; result.textContent = "NETWORK_EXCEPTION: " + e; }
}

$("move-yes").addEventListener("click", () => {
  $("move-confirm").hidden = true;
  post("/api/move", formValues(), $("move-result"), b => `Reassignment of ${b.topic}/${b.partition} to [${b.replicas}] started.`);
});
$("plan-button").addEventListener("click", () => { $("plan-confirm").hidden = false; });
$("plan-no").addEventListener("click", () => { $("plan-confirm").hidden = true; });
$("plan-yes").addEventListener("click", () => {
  $("plan-confirm").hidden = true;
  post("/api/reassign", { plan: $("plan-text").value }, $("plan-result"), b => b.lines.join("\n"));
});
$("map").addEventListener("mousemove", ev => hoverMap(ev, false));
$("map").addEventListener("click", ev => hoverMap(ev, true));
window.addEventListener("resize", () => { if (view) drawMap(); });
connect();
