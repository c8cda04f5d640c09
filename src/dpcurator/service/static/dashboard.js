// dpcurator dashboard: plain JavaScript, no library. The token lives in this tab's
// sessionStorage only and goes to this server's JSON routes as a bearer header. Every
// figure comes from those routes; the SVG pictures are drawn (and escaped) by the server.
"use strict";

const KEY = "dpcurator-token";
const $ = (id) => document.getElementById(id);
let overview = null;
let heat = null;
let cursor = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

function fmt(x) {
  if (x === null || x === undefined) return "—";
  if (typeof x !== "number") return String(x);
  return x.toLocaleString(undefined, { maximumSignificantDigits: 6 });
}

function when(t) {
  return new Date(t * 1000).toLocaleString();
}

function say(text, error) {
  const s = $("status");
  s.textContent = text || "";
  s.classList.toggle("error", !!error);
}

class Unauthorized extends Error {}

async function call(path, options) {
  const token = sessionStorage.getItem(KEY);
  const headers = { Authorization: "Bearer " + token };
  const init = Object.assign({ headers }, options || {});
  if (init.body) headers["Content-Type"] = "application/json";
  const r = await fetch(path, init);
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (r.status === 401) throw new Unauthorized((body && body.message) || "unauthorized");
  if (!r.ok) {
    const err = new Error((body && body.message) || ("HTTP " + r.status));
    err.reason = body && body.error;
    throw err;
  }
  return body;
}

function table(headers, rows, numeric) {
  const head = el("tr", {}, ...headers.map((h, i) =>
    el("th", { scope: "col", class: numeric && numeric[i] ? "num" : "" }, h)));
  const body = rows.map((r) => el("tr", {}, ...r.map((c, i) =>
    el("td", { class: numeric && numeric[i] ? "num" : "" }, c))));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, ...body));
}

function showSignedOut(message, error) {
  overview = null;
  heat = null;
  $("main").hidden = true;
  $("who").hidden = true;
  $("login").hidden = false;
  for (const id of ["budget-summary", "spend-chart", "analysts", "heat-map", "heat-summary",
    "heat-info", "heat-table-values", "panels", "answers", "refusals", "estimate"]) {
    $(id).replaceChildren();
  }
  say(message, error);
}

async function load() {
  say("Loading…");
  try {
    overview = await call("/v1/dashboard/overview");
  } catch (e) {
    if (e instanceof Unauthorized) {
      sessionStorage.removeItem(KEY);
      showSignedOut("That token was not accepted: " + e.message + ".", true);
      return;
    }
    say("Could not load the dashboard: " + e.message, true);
    return;
  }
  $("login").hidden = true;
  $("main").hidden = false;
  $("who").hidden = false;
  $("who-name").textContent = overview.you.name + (overview.you.admin ? " (administrator)" : " (analyst)");
  $("answers-title").textContent = overview.you.admin ? "Latest charges and answers" : "Your answers";
  renderOverview();
  fillAxes();
  await Promise.all([loadHeat(), loadAnswers(), loadRefusals()]);
  say("Updated " + new Date().toLocaleTimeString() + ".");
}

function card(label, value, meterFraction) {
  const c = el("div", { class: "card" }, el("div", { class: "label" }, label),
    el("div", { class: "value" }, value));
  if (meterFraction !== undefined) {
    const pct = Math.max(0, Math.min(1, meterFraction)) * 100;
    const bar = el("span", {});
    bar.setAttribute("data-width", pct.toFixed(1));
    c.append(el("div", { class: "meter", role: "img", "aria-label": pct.toFixed(0) + "% left" }, bar));
  }
  return c;
}

function renderOverview() {
  const o = overview;
  const r = o.remaining;
  const cur = o.currency;
  const cards = [
    card("Budget", o.budget),
    card("Privacy unit", o.unit_text),
    card("Left at the worst point (for everyone)", fmt(r.remaining_budget) + " " + cur,
      r.remaining_budget / o.total),
  ];
  if (r.quota !== null) {
    cards.push(card("Your quota", fmt(r.quota) + " " + cur));
    cards.push(card("Your quota left (worst point)", fmt(r.quota_remaining) + " " + cur,
      r.quota_remaining / r.quota));
  }
  cards.push(card(o.you.admin ? "Charges in the ledger" : "Your charges", fmt(o.charges)));
  if (!r.exact) cards.push(card("Note", "figures are lower bounds (time limit)"));
  $("budget-summary").replaceChildren(...cards);
  // meter widths: set through the DOM (the page allows no inline style attributes)
  for (const s of document.querySelectorAll(".meter > span")) {
    s.style.width = s.getAttribute("data-width") + "%";
  }
  $("spend-chart").innerHTML = o.spend.svg;
  $("spend-chart").append(el("figcaption", { class: "hint" },
    o.you.admin ? "The cost charged to each analyst, added up over time; the dashed line is the budget."
      : "The cost charged to you, added up over time; the dashed line is the budget."));
  const rows = o.analysts.map((a) => [
    a.name, a.admin ? "administrator" : "analyst", a.active ? "yes" : "no",
    fmt(a.charges), fmt(a.charged), a.spent === null ? "—" : fmt(a.spent) + (a.exact ? "" : " (at most)"),
    fmt(a.quota), fmt(a.quota_remaining),
  ]);
  const caption = el("caption", {}, o.you.admin ? "Analysts" : "You");
  const t = table(["Name", "Role", "Token works", "Charges", "Charged (" + cur + ")",
    "Most lost by one " + (o.privacy_unit ? o.privacy_unit.name : "person") + " (" + cur + ")", "Quota", "Quota left"], rows,
  [false, false, false, true, true, true, true, true]);
  t.prepend(caption);
  $("analysts").replaceChildren(t);
  $("est-cost-label").textContent = "Cost (" + cur + ")";
}

function fillAxes() {
  const tables = Object.keys(overview.tables);
  const tsel = $("heat-table");
  const keep = tsel.value;
  tsel.replaceChildren(...tables.map((t) => el("option", { value: t }, t)));
  if (tables.includes(keep)) tsel.value = keep;
  $("heat-table-field").hidden = tables.length < 2;
  fillAttributes();
}

function fillAttributes() {
  const attrs = overview.tables[$("heat-table").value] || [];
  for (const [id, dflt] of [["heat-rows", 0], ["heat-cols", 1]]) {
    const sel = $(id);
    const keep = sel.value;
    sel.replaceChildren(...attrs.map((a) => el("option", { value: a.name },
      a.name + " (" + a.size + (a.size > 100 ? " values, binned)" : " values)"))));
    if (attrs.some((a) => a.name === keep)) sel.value = keep;
    else if (attrs[dflt]) sel.value = attrs[dflt].name;
  }
}

async function loadHeat() {
  const params = new URLSearchParams();
  for (const [name, id] of [["table", "heat-table"], ["rows", "heat-rows"], ["cols", "heat-cols"],
    ["row_bins", "heat-row-bins"], ["col_bins", "heat-col-bins"]]) {
    const v = $(id).value.trim();
    if (v) params.set(name, v);
  }
  const box = $("heat-map");
  try {
    heat = await call("/v1/dashboard/heatmap?" + params.toString());
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    heat = null;
    box.replaceChildren();
    $("heat-summary").textContent = "";
    $("heat-info").textContent = "Cannot draw this heat map: " + e.message;
    $("heat-info").classList.add("error");
    return;
  }
  $("heat-info").classList.remove("error");
  box.innerHTML = heat.svg;
  cursor = null;
  const values = heat.remaining.flat();
  const lowest = Math.min(...values);
  const empty = values.filter((v) => v <= 0).length;
  let text = heat.rows.attribute + " by " + heat.cols.attribute + ": " + values.length +
    " cells; the least left on a cell is " + fmt(lowest) + " " + heat.currency +
    " of " + fmt(heat.total) + (empty ? "; " + empty + " cells have nothing left" : "") + ".";
  if (heat.quota_remaining) text += " Colours show the smaller of the budget and your quota.";
  if (!heat.exact) text += " " + heat.inexact_cells + " cells (dotted) are lower bounds: the exact computation ran out of time.";
  $("heat-summary").textContent = text;
  $("heat-info").textContent = "";
  if ($("heat-details").open) buildHeatTable();
}

function cellText(i, j) {
  const h = heat;
  let s = h.rows.attribute + " = " + h.rows.labels[i] + ", " + h.cols.attribute + " = " +
    h.cols.labels[j] + ": " + fmt(h.remaining_budget[i][j]) + " " + h.currency + " left";
  if (h.quota_remaining) s += " (of your quota: " + fmt(h.quota_remaining[i][j]) + ")";
  if (!h.cell_exact[i][j]) s += " (at least)";
  return s;
}

function moveCursor(i, j) {
  const svg = $("heat-map").querySelector("svg");
  if (!svg || !heat) return;
  const d = svg.dataset;
  const rows = Number(d.rows), cols = Number(d.cols);
  i = Math.max(0, Math.min(rows - 1, i));
  j = Math.max(0, Math.min(cols - 1, j));
  cursor = [i, j];
  const mark = svg.querySelector("#hm-cursor");
  mark.setAttribute("x", Number(d.left) + j * Number(d.cw));
  mark.setAttribute("y", Number(d.top) + i * Number(d.ch));
  mark.setAttribute("visibility", "visible");
  $("heat-info").textContent = cellText(i, j);
}

function onHeatPointer(ev) {
  const svg = $("heat-map").querySelector("svg");
  if (!svg || !heat) return;
  const d = svg.dataset;
  const box = svg.getBoundingClientRect();
  const x = ev.clientX - box.left - Number(d.left);
  const y = ev.clientY - box.top - Number(d.top);
  const j = Math.floor(x / Number(d.cw)), i = Math.floor(y / Number(d.ch));
  if (i >= 0 && j >= 0 && i < Number(d.rows) && j < Number(d.cols)) moveCursor(i, j);
}

function onHeatKey(ev) {
  if (!heat) return;
  const [i, j] = cursor || [0, 0];
  const moves = {
    ArrowUp: [i - 1, j], ArrowDown: [i + 1, j], ArrowLeft: [i, j - 1], ArrowRight: [i, j + 1],
    Home: [i, 0], End: [i, heat.cols.labels.length - 1],
  };
  if (!cursor && ev.key in moves) { moveCursor(0, 0); ev.preventDefault(); return; }
  if (ev.key in moves) {
    moveCursor(...moves[ev.key]);
    ev.preventDefault();
  }
}

function buildHeatTable() {
  if (!heat) return;
  const h = heat;
  const head = [h.rows.attribute + " \\ " + h.cols.attribute, ...h.cols.labels];
  const rows = h.rows.labels.map((label, i) => [label, ...h.remaining[i].map((v) => fmt(v))]);
  const t = table(head, rows, head.map((_, k) => k > 0));
  for (const tr of t.tBodies[0].rows) {
    const first = tr.cells[0];
    const th = el("th", { scope: "row" }, first.textContent);
    first.replaceWith(th);
  }
  t.prepend(el("caption", {}, h.currency + " left on each cell"));
  $("heat-table-values").replaceChildren(t);
}

async function loadAnswers() {
  let data;
  try {
    data = await call("/v1/dashboard/answers?limit=50");
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    $("answers").textContent = "Cannot load the answers: " + e.message;
    return;
  }
  $("panels").replaceChildren(...data.panels.map((p) => {
    const fig = el("figure", {});
    fig.innerHTML = p.svg;
    fig.append(el("figcaption", {}, p.title));
    return fig;
  }));
  if (!data.answers.length) {
    $("answers").replaceChildren(el("p", {}, "No charges yet."));
    return;
  }
  const admin = overview && overview.you.admin;
  const rows = data.answers.map((a) => {
    const shown = a.cells.slice(0, 4).map((c) => c.label + ": " + c.value +
      (c.low === null ? "" : " [" + c.low + ", " + c.high + "]"));
    if (a.cells_total > 4) shown.push("… " + (a.cells_total - 4) + " more");
    if (a.release) {  // a strategy's table: part of a release whose answers are derived
      shown.push("release of charges #" + a.release.join(", #"));
      if (a.derived) {
        const d = a.derived.slice(0, 3).map((x) => x.query + " ≈ " + x.value.toFixed(1));
        shown.push("derived " + a.derived_total + " answers: " + d.join("; ") +
          (a.derived_total > 3 ? "; …" : ""));
      }
    }
    const answer = a.answered ? shown.join("; ") : "(not recorded)";
    const row = [String(a.charge_id), when(a.created)];
    if (admin) row.push(a.analyst === null ? "—" : a.analyst);
    row.push(a.kind, a.request, fmt(a.cost), a.half_width === null ? "—" : "± " + a.half_width, answer);
    return row;
  });
  const head = ["#", "Time"];
  if (admin) head.push("Analyst");
  head.push("Kind", "Request", "Cost (" + (overview ? overview.currency : "") + ")", "95% interval", "Answer");
  const numeric = head.map((h) => h === "#" || h.startsWith("Cost"));
  $("answers").replaceChildren(table(head, rows, numeric));
}

async function loadRefusals() {
  let data;
  try {
    data = await call("/v1/dashboard/refusals?limit=50");
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    $("refusals").textContent = "Cannot load the refusals: " + e.message;
    return;
  }
  if (!data.refusals.length) {
    $("refusals").replaceChildren(el("p", {}, "No refusals since this server started."));
    return;
  }
  const admin = overview && overview.you.admin;
  const rows = data.refusals.map((r) => {
    const row = [when(r.time)];
    if (admin) row.push(r.analyst === null ? "—" : r.analyst);
    row.push(r.route, r.request === null ? "—" : r.request, fmt(r.cost), fmt(r.left), r.message);
    return row;
  });
  const head = ["Time"];
  if (admin) head.push("Analyst");
  head.push("Route", "Request", "Cost", "Left", "Message");
  $("refusals").replaceChildren(table(head, rows, head.map((h) => h === "Cost" || h === "Left")));
}

function kindFields() {
  const kind = $("est-kind").value;
  for (const node of document.querySelectorAll("#estimate-form [data-kinds]")) {
    node.hidden = !node.getAttribute("data-kinds").split(" ").includes(kind);
  }
}

async function estimate(ev) {
  ev.preventDefault();
  const kind = $("est-kind").value;
  const body = { kind };
  const text = (id) => $(id).value.trim();
  const cost = Number(text("est-cost"));
  body[overview ? overview.currency : "epsilon"] = cost;
  if (kind === "count" && text("est-query")) body.query = text("est-query");
  const stat = ["mean", "variance", "stdev", "quantile", "median"].includes(kind);
  if (kind === "histogram" || kind === "sum" || stat) body.attribute = text("est-attribute");
  if (kind === "marginal") body.attributes = text("est-attributes").split(",").map((s) => s.trim()).filter(Boolean);
  if (kind === "histogram" && text("est-bins")) {
    body.bins = text("est-bins").split(",").map((s) => Number(s.trim()));
  }
  if (kind === "sum" || kind === "mean" || kind === "variance" || kind === "stdev") {
    body.lower = Number(text("est-lower"));
    body.upper = Number(text("est-upper"));
  }
  if (kind === "quantile") body.q = Number(text("est-q"));
  if (stat && text("est-by")) body.by = text("est-by").split(",").map((s) => s.trim()).filter(Boolean);
  if (kind !== "count" && text("est-where")) body.where = text("est-where");
  const out = $("estimate");
  try {
    const e = await call("/v1/estimate", { method: "POST", body: JSON.stringify(body) });
    out.replaceChildren(table(["", ""], [
      ["Request", e.request],
      ["Cells", fmt(e.cells)],
      ["Cost", fmt(e.cost.amount) + " " + e.cost.currency],
      ["Noise", e.noise.name + " (" + fmt(e.noise.parameter) + ")"],
      ["Expected error", "± " + fmt(e.expected_abs_error)],
      e.kind === "quantile"
        ? ["95% rank error", "± " + e.half_width + " rows"]
        : ["95% interval", "± " + e.half_width],
      ...(e.error ? [["Error", e.error]] : []),
      ["Admitted now", el("span", { class: e.admitted ? "yes" : "no" }, e.admitted ? "yes" : "no")],
    ]));
    out.querySelector("thead").remove();
  } catch (e) {
    if (e instanceof Unauthorized) { showSignedOut("That token was not accepted.", true); return; }
    out.replaceChildren(el("p", { class: "error" }, "Not estimated: " + e.message));
  }
}

async function refresh() {
  try {
    await load();
  } catch (e) {
    if (e instanceof Unauthorized) {
      sessionStorage.removeItem(KEY);
      showSignedOut("That token was not accepted: " + e.message + ".", true);
    } else {
      say("Could not load the dashboard: " + e.message, true);
    }
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("token").value.trim();
    $("token").value = "";
    if (!token) return;
    sessionStorage.setItem(KEY, token);
    refresh();
  });
  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    showSignedOut("Signed out; the token was removed from this tab.");
  });
  $("refresh").addEventListener("click", refresh);
  $("heat-table").addEventListener("change", fillAttributes);
  $("heat-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    say("Drawing the heat map…");
    try {
      await loadHeat();
      say("Heat map updated " + new Date().toLocaleTimeString() + ".");
    } catch (e) {
      if (e instanceof Unauthorized) showSignedOut("That token was not accepted.", true);
    }
  });
  const map = $("heat-map");
  map.addEventListener("mousemove", onHeatPointer);
  map.addEventListener("keydown", onHeatKey);
  map.addEventListener("focus", () => { if (heat && !cursor) moveCursor(0, 0); });
  $("heat-details").addEventListener("toggle", () => { if ($("heat-details").open) buildHeatTable(); });
  $("est-kind").addEventListener("change", kindFields);
  $("estimate-form").addEventListener("submit", estimate);
  kindFields();
  if (sessionStorage.getItem(KEY)) refresh();
});
