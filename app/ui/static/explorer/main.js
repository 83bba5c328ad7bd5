// The query explorer: sub-queries and a range -> /api/query -> a chart with the notes, and
// the same call as a URL and a curl command.

import { aggregators, request, serverStatus, suggest, toMs } from "../common/api.js";
import { COLORS, drawChart } from "../common/chart.js";
import { showErrors } from "../common/errors.js";
import { exploreUrl } from "../common/grafana.js";
import { PRESETS_MS, initRange, rangeParams, readRange } from "../common/range.js";
import { attachMetricSuggest, attachTagSuggest } from "../common/suggest.js";
import { formatTime } from "../common/time.js";
import { curlCommand, parseM, queryPath } from "./query.js";

const $ = (id) => document.getElementById(id);
const MAX_LINES = 30;
const DOWNSAMPLERS = ["avg", "sum", "min", "max", "count", "first", "last", "median", "p95",
  "p99", "dev"];
const state = { aggregators: ["sum"], rows: 0, last: null };

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
  options(field("aggregator"), state.aggregators, q.aggregator || "sum");
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
  attachTagSuggest(field("tags"), tagList);
  row.querySelector("[data-action=remove]").setAttribute("aria-label", `Remove sub-query ${n}`);
  row.querySelector("[data-action=remove]").addEventListener("click", () => {
    row.remove();
    syncRemove();
  });
  $("subqueries").append(row);
  syncRemove();
  return row;
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

// --- running the query ---------------------------------------------------------------------

function readQuery() {
  const { range, errors } = readRange();
  const queries = readRows(errors);
  const preset = $("range-preset").value;
  // A preset stays relative ("24h-ago"), so the copied URL shows the last 24 hours tomorrow too.
  const relative = preset in PRESETS_MS;
  return { errors, range, queries, start: relative ? `${preset}-ago` : String(range.startMs),
    end: relative ? "" : String(range.endMs) };
}

function remember(query) {
  const params = new URLSearchParams();
  rangeParams(params, query.range);
  for (const row of query.path.split("&").filter((p) => p.startsWith("m="))) {
    params.append("m", decodeURIComponent(row.slice(2)));
  }
  history.replaceState(null, "", `?${params}`);
}

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

async function run() {
  const query = readQuery();
  showErrors($("query-form"), $("query-errors"), query.errors);
  if (query.errors.length) return;
  query.path = queryPath(query);
  remember(query);
  showCall(query);
  $("chart-summary").textContent = "Running the query…";
  try {
    const { body } = await request(query.path);
    draw(query, body || []);
  } catch (error) {
    showErrors($("query-form"), $("query-errors"), [{ field: null, message: error.message }]);
    $("chart-summary").textContent = "The query failed: see the message above.";
  }
}

function draw(query, results) {
  const series = results.map((result, i) => ({ label: seriesLabel(result),
    color: COLORS[i % COLORS.length],
    points: Object.entries(result.dps || {}).map(([t, v]) => [toMs(Number(t)), v])
      .sort((a, b) => a[0] - b[0]) }));
  const shown = series.slice(0, MAX_LINES);
  const notes = notesOf(results.slice(0, MAX_LINES), shown);
  state.last = { query, series: shown, notes };
  const { mode, unlabelled } = drawChart($("chart"), { series: shown, notes, range: query.range,
    onSelect: openNote, tooltip: $("chart-tooltip") });
  const legend = shown.map((s) => {
    const item = document.createElement("li");
    item.style.setProperty("--swatch", s.color); // CSSOM: CSP-safe
    item.textContent = s.label;
    return item;
  });
  if (notes.some((n) => !n.tsuid)) {
    const key = document.createElement("li");
    key.className = "global-note";
    key.textContent = "Global note";
    legend.push(key);
  }
  $("chart-legend").replaceChildren(...legend);
  const points = shown.reduce((sum, s) => sum + s.points.length, 0);
  const more = series.length > MAX_LINES ? ` (the first ${MAX_LINES} drawn)` : "";
  const hidden = unlabelled ? ` ${plural(unlabelled, "note")} without room for a label: `
    + "hover over or focus a marker." : "";
  $("chart-summary").textContent = mode === "empty" ? "No data and no notes in this range."
    : `${plural(series.length, "series")}${more}, ${plural(points, "point")}, `
      + `${plural(notes.length, "note")} from ${formatTime(query.range.startMs)} to `
      + `${formatTime(query.range.endMs)}.${hidden}`;
  const grafana = exploreUrl(query.queries.map((q) => ({ ...q,
    downsample: q.interval ? `${q.interval}-${q.fn}-${q.fill}` : "" })), query.range);
  $("grafana-link").hidden = !grafana;
  if (grafana) $("grafana-link").href = grafana;
}

/** A note on the chart opens in the annotation manager, on its range and series. */
function openNote(note) {
  const params = new URLSearchParams();
  rangeParams(params, state.last.query.range);
  params.set("q", note.description);
  location.assign(`/annotations?${params}`);
}

function showCall(query) {
  $("api-url").textContent = query.path;
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
  } catch (error) {
    $("status-storage").textContent = `unavailable (${error.message})`;
  }
}

async function init() {
  const params = new URLSearchParams(location.search);
  initRange(params, () => state.last && run());
  $("query-form").addEventListener("submit", (event) => { event.preventDefault(); run(); });
  $("add-subquery").addEventListener("click", () => addRow().querySelector("input").focus());
  $("copy-url").addEventListener("click", () => copy("api-url"));
  $("copy-curl").addEventListener("click", () => copy("api-curl"));
  showStatus();
  try {
    state.aggregators = await aggregators();
  } catch {
    // keep "sum": the query still runs, and its error (if any) says what is wrong
  }
  const wanted = params.getAll("m");
  for (const m of wanted) addRow(parseM(m));
  if (!wanted.length) {
    // A first visit shows something: the first metric, summed, on 5-minute averages.
    const [metric] = await suggest("metrics", "", 1);
    addRow({ metric: metric || "", aggregator: "sum", interval: metric ? "5m" : "" });
    if (metric) run();
  } else {
    run();
  }
}

init();
