// The query explorer: sub-queries and a range -> /api/query -> a chart (hover values, zoom,
// legend to hide or isolate) or a table, with the notes, and the same call as a URL and a
// curl command. Each run is a browser history entry; the address holds the whole view.

import { aggregators, request, serverStatus, toMs } from "../common/api.js";
import { attachPlot } from "../common/chart-hover.js";
import { COLORS, clearChart, drawChart, valueLabel } from "../common/chart.js";
import { showErrors } from "../common/errors.js";
import { exploreUrl } from "../common/grafana.js";
import { PRESETS_MS, initRange, rangeParams, readRange, setCustomRange, setRange }
  from "../common/range.js";
import { attachMetricSuggest, attachTagSuggest } from "../common/suggest.js";
import { formatTime } from "../common/time.js";
import { curlCommand, parseM, queryPath } from "./query.js";

const $ = (id) => document.getElementById(id);
const MAX_LINES = 30;
const MAX_TABLE_ROWS = 1000;
const DOWNSAMPLERS = ["avg", "sum", "min", "max", "count", "first", "last", "median", "p95",
  "p99", "dev"];
const REFRESH_MS = { "10s": 10e3, "30s": 30e3, "1m": 60e3, "5m": 300e3 };
const state = { aggregators: ["sum"], rows: 0, last: null, hidden: new Set(), plot: null,
  view: "chart", refresh: null, unzoomed: null, running: 0, started: false };

const plural = (n, word) => `${n} ${word}${n === 1 || word === "series" ? "" : "s"}`;

function options(select, values, chosen) {
  select.replaceChildren(...values.map((value) => {
    const option = document.createElement("option");
    option.value = value;
    option.textContent = value;
    return option;
  }));
  if (values.includes(chosen)) select.value = chosen;
}

// --- sub-query rows ------------------------------------------------------------------------

function addRow(q = {}) {
  state.rows += 1;
  const n = state.rows;
  const row = $("subquery-template").content.firstElementChild.cloneNode(true);
  row.querySelector("legend").textContent = `Sub-query ${n}`;
  for (const label of row.querySelectorAll("label[data-for]")) {
    const field = row.querySelector(`[data-name="${label.dataset.for}"]`);
    field.id = `q${n}-${label.dataset.for}`;
    label.htmlFor = field.id;
  }
  const field = (name) => row.querySelector(`[data-name="${name}"]`);
  options(field("aggregator"), state.aggregators, q.aggregator || "avg");
  options(field("function"), DOWNSAMPLERS, q.fn || "avg");
  field("metric").value = q.metric || "";
  field("tags").value = q.tags || "";
  field("interval").value = q.interval || "";
  field("fill").value = q.fill || "none";
  field("rate").checked = Boolean(q.rate);
  const tagList = document.createElement("datalist");
  tagList.id = `q${n}-tag-suggestions`;
  field("tags").setAttribute("list", tagList.id);
  row.append(tagList);
  attachMetricSuggest(field("metric"), $("metric-suggestions"));
  attachTagSuggest(field("tags"), tagList, field("metric"));
  row.querySelector("[data-action=remove]").setAttribute("aria-label", `Remove sub-query ${n}`);
  row.querySelector("[data-action=remove]").addEventListener("click", () => {
    row.remove();
    syncRemove();
  });
  $("subqueries").append(row);
  syncRemove();
  return row;
}

function setRows(queries) {
  $("subqueries").replaceChildren();
  state.rows = 0;
  for (const q of queries) addRow(q);
}

function syncRemove() {
  const buttons = $("subqueries").querySelectorAll("[data-action=remove]");
  for (const button of buttons) button.hidden = buttons.length === 1;
}

function readRows(errors) {
  return [...$("subqueries").querySelectorAll(".subquery")].map((row) => {
    const field = (name) => row.querySelector(`[data-name="${name}"]`);
    const q = { metric: field("metric").value.trim(), tags: field("tags").value.trim(),
      aggregator: field("aggregator").value, interval: field("interval").value.trim(),
      fn: field("function").value, fill: field("fill").value, rate: field("rate").checked };
    if (!q.metric) errors.push({ field: field("metric").id, message: "Enter a metric." });
    if (q.interval && !/^\d+(ms|s|m|h|d|w|n|y)c?$|^0all$/.test(q.interval)) {
      errors.push({ field: field("interval").id,
        message: `Downsample “${q.interval}” is not an interval like 30s, 1m or 1h.` });
    }
    return q;
  });
}

// --- the address: one history entry per query run -------------------------------------------

function readQuery() {
  const { range, errors } = readRange();
  const queries = readRows(errors);
  const preset = $("range-preset").value;
  // A preset stays relative ("24h-ago"), so the copied URL shows the last 24 hours tomorrow too.
  const relative = preset in PRESETS_MS;
  return { errors, range, queries, start: relative ? `${preset}-ago` : String(range.startMs),
    end: relative ? "" : String(range.endMs) };
}

function addressOf(query) {
  const params = new URLSearchParams();
  rangeParams(params, query.range);
  for (const row of query.path.split("&").filter((p) => p.startsWith("m="))) {
    params.append("m", decodeURIComponent(row.slice(2)));
  }
  if ($("refresh").value) params.set("refresh", $("refresh").value);
  if (state.view === "table") params.set("view", "table");
  return `?${params}`;
}

/** A new entry when the view changed (Back returns to the previous query); else replace. */
function remember(query, push) {
  const address = addressOf(query);
  if (push && address !== location.search) history.pushState(null, "", address);
  else history.replaceState(null, "", address);
}

/** Set the whole page from an address (a first visit, a shared link, Back and Forward). */
function applyAddress(params) {
  setRange(params);
  setRows(params.getAll("m").map(parseM));
  $("refresh").value = params.get("refresh") in REFRESH_MS ? params.get("refresh") : "";
  setView(params.get("view") === "table" ? "table" : "chart");
  schedule();
}

// --- running the query ---------------------------------------------------------------------

function seriesLabel(result) {
  const pairs = Object.entries(result.tags || {}).map(([k, v]) => `${k}=${v}`).join(",");
  return pairs ? `${result.metric}{${pairs}}` : result.metric;
}

function notesOf(results, series) {
  const notes = new Map();
  results.forEach((result, index) => {
    for (const note of result.annotations || []) {
      const owner = series[index];
      notes.set(`${note.tsuid}|${note.startTime}`, { ...note, owner: owner.label,
        color: owner.color });
    }
  });
  for (const note of (results[0] && results[0].globalAnnotations) || []) {
    notes.set(`|${note.startTime}`, { ...note, tsuid: "", owner: "Global", color: "" });
  }
  return [...notes].map(([key, note]) => ({ ...note, key, startMs: toMs(note.startTime),
    endMs: note.endTime ? toMs(note.endTime) : 0 }))
    .sort((a, b) => a.startMs - b.startMs);
}

/** Run the form's query; push: a new history entry (a user's run), not a refresh or Back. */
async function run({ push = true, quiet = false } = {}) {
  const query = readQuery();
  showErrors($("query-form"), $("query-errors"), quiet ? [] : query.errors);
  if (query.errors.length) return;
  query.path = queryPath(query);
  remember(query, push);
  showCall(query);
  if (!quiet) $("chart-summary").textContent = "Running the query…";
  state.started = true;
  const ticket = ++state.running;
  try {
    const { body } = await request(query.path);
    if (ticket !== state.running) return; // a later run has started: its answer wins
    const sameQuery = state.last && state.last.query.path === query.path;
    if (!sameQuery) state.hidden.clear();
    show(query, body || []);
  } catch (error) {
    if (ticket !== state.running) return;
    state.last = null;
    state.plot = null;
    clearChart($("chart"));
    $("chart-legend").replaceChildren();
    $("legend-help").hidden = true;
    fillTable([]);
    showErrors($("query-form"), $("query-errors"), [{ field: null, message: error.message }]);
    $("chart-summary").textContent = "The query failed: see the message above.";
  }
}

function show(query, results) {
  const series = results.map((result, i) => ({ label: seriesLabel(result),
    color: COLORS[i % COLORS.length],
    points: Object.entries(result.dps || {}).map(([t, v]) => [toMs(Number(t)), v])
      .sort((a, b) => a[0] - b[0]) }));
  const shown = series.slice(0, MAX_LINES);
  const notes = notesOf(results.slice(0, MAX_LINES), shown);
  state.last = { query, series, shown, notes };
  draw();
  fillTable(shown.filter((s) => !state.hidden.has(s.label)));
  const grafana = exploreUrl(query.queries.map((q) => ({ ...q,
    downsample: q.interval ? `${q.interval}-${q.fn}-${q.fill}` : "" })), query.range);
  $("grafana-link").hidden = !grafana;
  if (grafana) $("grafana-link").href = grafana;
}

/** The chart and legend of the last answer, without the hidden series. */
function draw() {
  const { query, series, shown, notes } = state.last;
  const visible = shown.filter((s) => !state.hidden.has(s.label));
  const { mode, unlabelled, plot } = drawChart($("chart"), { series: visible, notes,
    range: query.range, onSelect: openNote, tooltip: $("chart-tooltip") });
  state.plot = plot;
  drawLegend(shown, notes);
  const points = shown.reduce((sum, s) => sum + s.points.length, 0);
  const more = series.length > MAX_LINES ? ` (the first ${MAX_LINES} drawn)` : "";
  const hiddenCount = shown.length - visible.length;
  const hidden = hiddenCount ? ` ${hiddenCount} hidden (see the legend).` : "";
  const unplaced = unlabelled ? ` ${plural(unlabelled, "note")} without room for a label: `
    + "hover over or focus a marker." : "";
  $("chart-summary").textContent = mode === "empty" && !shown.length
    ? "No data and no notes in this range."
    : `${plural(series.length, "series")}${more}, ${plural(points, "point")}, `
      + `${plural(notes.length, "note")} from ${formatTime(query.range.startMs)} to `
      + `${formatTime(query.range.endMs)}.${hidden}${unplaced}`;
}

function drawLegend(shown, notes) {
  const legend = shown.map((s) => {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "legend-entry";
    button.style.setProperty("--swatch", s.color); // CSSOM: CSP-safe
    button.textContent = s.label;
    button.setAttribute("aria-pressed", String(!state.hidden.has(s.label)));
    button.addEventListener("click", (event) => legendClick(s.label, event));
    item.append(button);
    return item;
  });
  if (notes.some((n) => !n.tsuid)) {
    const key = document.createElement("li");
    key.className = "global-note";
    key.textContent = "Global note";
    legend.push(key);
  }
  $("chart-legend").replaceChildren(...legend);
  $("legend-help").hidden = shown.length === 0;
}

/** Click: this series alone (again: all of them). Ctrl/Cmd+click: hide or show this one. */
function legendClick(label, event) {
  const labels = state.last.shown.map((s) => s.label);
  if (event.ctrlKey || event.metaKey) {
    if (state.hidden.has(label)) state.hidden.delete(label); else state.hidden.add(label);
  } else {
    const alone = labels.every((l) => (l === label) !== state.hidden.has(l));
    state.hidden = new Set(alone ? [] : labels.filter((l) => l !== label));
  }
  draw();
  fillTable(state.last.shown.filter((s) => !state.hidden.has(s.label)));
  $("chart-legend").querySelectorAll("button")[labels.indexOf(label)]?.focus();
}

// --- the table view ----------------------------------------------------------------------

/** One row per time, one column per shown series (empty where a series has no point). */
function fillTable(series) {
  const times = [...new Set(series.flatMap((s) => s.points.map(([t]) => t)))]
    .sort((a, b) => a - b);
  const byTime = series.map((s) => new Map(s.points));
  const head = ["Time", ...series.map((s) => s.label)].map((text) => {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = text;
    return th;
  });
  $("points-head").replaceChildren(...head);
  const rows = times.slice(0, MAX_TABLE_ROWS).map((t) => {
    const tr = document.createElement("tr");
    const when = document.createElement("th");
    when.scope = "row";
    when.textContent = formatTime(t);
    tr.append(when, ...byTime.map((values) => {
      const td = document.createElement("td");
      const v = values.get(t);
      td.textContent = v === undefined ? "" : String(v);
      if (Number.isFinite(v)) td.title = valueLabel(v);
      return td;
    }));
    return tr;
  });
  $("points-body").replaceChildren(...rows);
  const cut = times.length > MAX_TABLE_ROWS ? ` (the first ${MAX_TABLE_ROWS} times of `
    + `${times.length})` : "";
  $("points-caption").textContent = series.length
    ? `${plural(times.length, "time")} × ${plural(series.length, "series")}${cut}`
    : "No points.";
}

function setView(view) {
  state.view = view;
  $("chart-view").hidden = view !== "chart";
  $("table-view").hidden = view !== "table";
  $("show-chart").setAttribute("aria-pressed", String(view === "chart"));
  $("show-table").setAttribute("aria-pressed", String(view === "table"));
}

function switchView(view) {
  setView(view);
  if (view === "chart" && state.last) draw(); // the figure had no width while hidden
  if (state.last) remember(state.last.query, false);
}

// --- zoom and refresh --------------------------------------------------------------------

function zoom(startMs, endMs) {
  if (!state.unzoomed) {
    state.unzoomed = { preset: $("range-preset").value, start: $("range-start").value,
      end: $("range-end").value };
  }
  // Whole seconds: the From/To fields stay short to read and edit.
  setCustomRange(Math.round(startMs / 1000) * 1000, Math.round(endMs / 1000) * 1000);
  $("reset-zoom").hidden = false;
  run();
}

function resetZoom() {
  const before = state.unzoomed;
  state.unzoomed = null;
  $("reset-zoom").hidden = true;
  if (!before) return;
  $("range-preset").value = before.preset;
  $("range-start").value = before.start;
  $("range-end").value = before.end;
  run();
}

/** Re-run on the chosen interval (a relative range then moves with the clock). */
function schedule() {
  clearInterval(state.refresh);
  const every = REFRESH_MS[$("refresh").value];
  state.refresh = every ? setInterval(() => run({ push: false, quiet: true }), every) : null;
}

/** A note on the chart opens in the annotation manager, on its range and series. */
function openNote(note) {
  const params = new URLSearchParams();
  rangeParams(params, state.last.query.range);
  params.set("q", note.description);
  location.assign(`/annotations?${params}`);
}

function showCall(query) {
  // Absolute: what is copied works from a terminal or another machine as it is.
  $("api-url").textContent = `${location.origin}${query.path}`;
  $("api-curl").textContent = curlCommand(location.origin, query.path);
}

async function copy(id) {
  const text = $(id).textContent;
  try {
    await navigator.clipboard.writeText(text);
    $("copy-status").textContent = "Copied.";
  } catch {
    // No clipboard access (an insecure origin): select the text for Ctrl+C instead.
    getSelection().selectAllChildren($(id));
    $("copy-status").textContent = "Selected: press Ctrl+C to copy.";
  }
}

// --- the status strip ------------------------------------------------------------------------

async function showStatus() {
  try {
    const s = await serverStatus();
    $("status-storage").textContent = `${s.storage.backend} ${s.storage.location}`;
    $("status-metrics").textContent = s.uids.metrics.toLocaleString("en");
    $("status-tagk").textContent = s.uids.tagk.toLocaleString("en");
    $("status-tagv").textContent = s.uids.tagv.toLocaleString("en");
    $("status-points").textContent = `${s.worker.pointsWritten.toLocaleString("en")} since `
      + formatTime(s.worker.startedMs - (s.worker.startedMs % 1000));
    return s;
  } catch (error) {
    $("status-storage").textContent = `unavailable (${error.message})`;
    return null;
  }
}

function wire() {
  $("query-form").addEventListener("submit", (event) => { event.preventDefault(); run(); });
  $("add-subquery").addEventListener("click", () => addRow().querySelector("input").focus());
  $("copy-url").addEventListener("click", () => copy("api-url"));
  $("copy-curl").addEventListener("click", () => copy("api-curl"));
  $("show-chart").addEventListener("click", () => switchView("chart"));
  $("show-table").addEventListener("click", () => switchView("table"));
  $("reset-zoom").addEventListener("click", resetZoom);
  $("refresh").addEventListener("change", () => {
    schedule();
    if (state.last) remember(state.last.query, false);
  });
  attachPlot($("chart"), $("chart-values"), { getPlot: () => state.plot, onZoom: zoom });
  window.addEventListener("popstate", () => {
    state.unzoomed = null;
    $("reset-zoom").hidden = true;
    applyAddress(new URLSearchParams(location.search));
    run({ push: false });
  });
  // Only a new width redraws: a height change (a phone's address bar) changes nothing drawn.
  let resizeTimer = null;
  let drawnWidth = window.innerWidth;
  window.addEventListener("resize", () => {
    if (window.innerWidth === drawnWidth) return;
    drawnWidth = window.innerWidth;
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => state.last && state.view === "chart" && draw(), 150);
  });
}

async function init() {
  const params = new URLSearchParams(location.search);
  initRange(params, () => state.started && run());
  wire();
  const status = showStatus();
  try {
    state.aggregators = await aggregators();
  } catch {
    // keep "sum": the query still runs, and its error (if any) says what is wrong
  }
  applyAddress(params);
  if (params.getAll("m").length) {
    run({ push: false });
    return;
  }
  // A first visit shows something: the metric written last (the newest name), averaged.
  const metric = ((await status) || {}).newestMetric || "";
  setRows([{ metric, aggregator: "avg", interval: metric ? "5m" : "" }]);
  if (metric) run({ push: false });
}

init();
