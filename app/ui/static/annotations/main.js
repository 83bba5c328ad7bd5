// The annotation manager: range + optional series + search -> chart, table; create, edit,
// delete (one or many, with an undo).

import { bulkDelete, bulkPut, listNotes, querySeries, toMs } from "../common/api.js";
import { COLORS, drawChart } from "../common/chart.js";
import { showErrors } from "../common/errors.js";
import { exploreUrl } from "../common/grafana.js";
import { initRange, rangeParams, readRange } from "../common/range.js";
import { attachMetricSuggest, attachTagSuggest } from "../common/suggest.js";
import { formatTime } from "../common/time.js";
import { customText, readForm, saveNote } from "./form.js";
import { NotesTable } from "./table.js";

const $ = (id) => document.getElementById(id);
const MAX_LINES = 20;
const state = { range: null, metric: "", tags: "", series: [], notes: [], editing: null,
  undo: null, seriesChoice: "" };
let table = null;

function status(message) {
  $("status").textContent = message;
}

const plural = (n, word) => `${n} ${word}${n === 1 || word === "series" ? "" : "s"}`;

function seriesLabel(metric, tags) {
  const pairs = Object.entries(tags || {}).map(([k, v]) => `${k}=${v}`).join(",");
  return pairs ? `${metric}{${pairs}}` : metric;
}

// --- the view ------------------------------------------------------------------------------

function readView() {
  const { range, errors } = readRange();
  const tags = $("view-tags").value.split(",").map((t) => t.trim()).filter(Boolean).join(",");
  if (tags && !$("view-metric").value.trim()) {
    errors.push({ field: "view-metric", message: "Tags need a metric." });
  }
  return { errors, range, metric: $("view-metric").value.trim(), tags,
    q: $("view-q").value.trim() };
}

function remember(view) {
  const params = new URLSearchParams();
  rangeParams(params, view.range);
  if (view.metric) params.set("m", view.metric);
  if (view.tags) params.set("tags", view.tags);
  if (view.q) params.set("q", view.q);
  history.replaceState(null, "", `?${params}`);
}

function toSeries(result, index) {
  const points = Object.entries(result.dps || {}).map(([t, v]) => [Number(t), v])
    .sort((a, b) => a[0] - b[0]);
  return { label: seriesLabel(result.metric, result.tags), tsuid: (result.tsuids || [])[0],
    color: COLORS[index % COLORS.length], points };
}

/** Series colours: a drawn series keeps its line's colour; other series with notes follow. */
function colourNotes(raw) {
  const colours = new Map(state.series.map((s) => [s.tsuid, s.color]));
  return raw.map((note) => {
    const startMs = toMs(note.startTime);
    const owner = note.tsuid ? seriesLabel(note.metric || note.tsuid, note.tags) : "Global";
    if (note.tsuid && !colours.has(note.tsuid)) {
      colours.set(note.tsuid, COLORS[colours.size % COLORS.length]);
    }
    return { ...note, key: `${note.tsuid || ""}|${note.startTime}`, startMs, owner,
      color: note.tsuid ? colours.get(note.tsuid) : "", endMs: note.endTime ? toMs(note.endTime) : 0 };
  });
}

async function load() {
  const view = readView();
  showErrors($("view-form"), $("view-errors"), view.errors);
  if (view.errors.length) return;
  remember(view);
  Object.assign(state, { range: view.range, metric: view.metric, tags: view.tags });
  status("Loading…");
  const spanS = (view.range.endMs - view.range.startMs) / 1000;
  const downsample = `${Math.max(1, Math.round(spanS / 600))}s-avg`;
  try {
    const [listing, results] = await Promise.all([
      listNotes({ ...view.range, metric: view.metric, tags: view.tags, q: view.q }),
      view.metric ? querySeries({ ...view.range, metric: view.metric, tags: view.tags, downsample })
        : Promise.resolve([]),
    ]);
    state.series = results.map(toSeries);
    state.notes = colourNotes(listing.annotations);
    state.listing = listing;
    render();
    status(`Showing ${plural(state.notes.length, "note")}.`);
  } catch (error) {
    showErrors($("view-form"), $("view-errors"), [{ field: null, message: error.message }]);
    status("");
  }
}

// --- rendering -----------------------------------------------------------------------------

function render() {
  renderChart();
  table.setNotes(state.notes);
  renderCaption();
  renderSeriesChoices();
  renderGrafanaLink();
}

function legendItem(label, color, className = "") {
  const item = document.createElement("li");
  item.className = className;
  if (color) item.style.setProperty("--swatch", color); // CSSOM: CSP-safe
  item.textContent = label;
  return item;
}

function renderChart() {
  const shown = state.series.slice(0, MAX_LINES);
  const { mode, unlabelled } = drawChart($("chart"), { series: shown, notes: state.notes,
    range: state.range, onSelect: startEdit, tooltip: $("chart-tooltip") });
  const owners = new Map(state.notes.filter((n) => n.tsuid).map((n) => [n.owner, n.color]));
  const items = shown.map((s) => legendItem(s.label, s.color, "line"));
  if (mode === "timeline") {
    items.push(...[...owners].map(([owner, color]) => legendItem(owner, color, "series-note")));
  }
  if (state.notes.some((n) => !n.tsuid)) items.push(legendItem("Global note", "", "global-note"));
  $("chart-legend").replaceChildren(...(mode === "empty" ? [] : items));
  const what = state.metric ? `${state.metric}${state.tags ? `{${state.tags}}` : ""}` : "";
  const more = state.series.length > MAX_LINES ? ` (the first ${MAX_LINES} drawn)` : "";
  const hidden = unlabelled ? ` ${plural(unlabelled, "note")} without room for a label: `
    + "hover over or focus a marker to read it." : "";
  const summary = {
    lines: `${what}: ${plural(state.series.length, "series")}${more}, `
      + `${plural(state.notes.length, "note")}.${hidden}`,
    timeline: `${what ? `${what}: no data in this range. ` : "No series chosen: "}`
      + `the ${plural(state.notes.length, "note")} of the range on a timeline, `
      + `one lane per series.${hidden}`,
    empty: `${what ? `${what}: no data and n` : "N"}o notes in this range.`,
  }[mode];
  $("chart-summary").textContent = summary;
}

function renderCaption() {
  const listing = state.listing;
  const shown = state.notes.length;
  const truncated = listing.truncated ? ` (the first ${shown} of ${listing.total})` : "";
  const scope = state.metric ? "global notes and those of the chosen series"
    : "global notes and those of every series";
  $("notes-caption").textContent = `${plural(shown, "note")} (${scope}) between `
    + `${formatTime(state.range.startMs)} and ${formatTime(state.range.endMs)}${truncated}`;
}

function renderGrafanaLink() {
  const url = exploreUrl([{ metric: state.metric, tags: state.tags, aggregator: "sum" }],
    state.range);
  $("grafana-link").hidden = !url;
  if (url) $("grafana-link").href = url;
}

/** The Series select: a first "no series" choice (what a global note has), then the series
 * of the chart and of the notes. */
function renderSeriesChoices(extra = null) {
  const select = $("note-series");
  const choices = new Map(state.series.filter((s) => s.tsuid).map((s) => [s.tsuid, s.label]));
  for (const note of state.notes) if (note.tsuid) choices.set(note.tsuid, note.owner);
  if (extra) choices.set(extra.tsuid, extra.owner);
  const current = state.seriesChoice || select.value;
  const none = document.createElement("option");
  none.value = "";
  none.textContent = "None: a global note";
  select.replaceChildren(none, ...[...choices].map(([tsuid, label]) => {
    const option = document.createElement("option");
    option.value = tsuid;
    option.textContent = label;
    return option;
  }));
  state.seriesChoice = choices.has(current) ? current : "";
  syncScope();
}

/** Global: the select disabled on "None"; one series: the series chosen last, or the first. */
function syncScope() {
  const select = $("note-series");
  const series = $("note-form").elements.scope.value === "series";
  if (!series && select.value) state.seriesChoice = select.value;
  select.disabled = !series;
  const first = select.options.length > 1 ? select.options[1].value : "";
  select.value = series ? state.seriesChoice || first : "";
  if (select.options.length) {
    select.options[0].textContent = series ? "Choose a series" : "None: a global note";
  }
}

// --- editing -------------------------------------------------------------------------------

function resetForm() {
  const form = $("note-form");
  form.reset();
  state.editing = null;
  form.elements.start.value = formatTime(Math.floor(Date.now() / 1000) * 1000);
  $("form-heading").textContent = "New note";
  $("note-save").textContent = "Create note";
  $("note-cancel").hidden = true;
  showErrors(form, $("form-errors"), []);
  syncScope();
}

function startEdit(note) {
  const form = $("note-form");
  resetForm();
  state.editing = note;
  renderSeriesChoices(note.tsuid ? note : null);
  form.elements.scope.value = note.tsuid ? "series" : "global";
  if (note.tsuid) state.seriesChoice = note.tsuid;
  form.elements.start.value = formatTime(note.startMs);
  form.elements.end.value = note.endMs ? formatTime(note.endMs) : "";
  form.elements.description.value = note.description;
  form.elements.notes.value = note.notes;
  form.elements.custom.value = customText(note.custom);
  $("form-heading").textContent = "Edit note";
  $("note-save").textContent = "Save changes";
  $("note-cancel").hidden = false;
  syncScope();
  $("form-heading").focus();
}

async function submit(event) {
  event.preventDefault();
  const form = $("note-form");
  const { note, startMs, errors } = readForm(form);
  showErrors(form, $("form-errors"), errors);
  if (errors.length) return;
  try {
    const editing = state.editing;
    await saveNote(note, startMs, editing);
    status(`${editing ? "Saved" : "Created"} note “${note.description}”.`);
    resetForm();
    await load();
  } catch (error) {
    showErrors(form, $("form-errors"), [{ field: null, message: error.message }]);
  }
}

// --- deleting, and undoing it ----------------------------------------------------------------

function offerUndo(message, notes) {
  state.undo = notes;
  $("undo-text").textContent = message;
  $("undo").hidden = !notes;
  $("undo-bar").hidden = false;
}

async function remove(notes) {
  try {
    const deleted = await bulkDelete(notes);
    if (state.editing && notes.some((n) => n.key === state.editing.key)) resetForm();
    table.clearSelection();
    offerUndo(notes.length === 1 ? `Deleted note “${notes[0].description}”.`
      : `Deleted ${plural(deleted, "note")}.`, notes);
    await load();
  } catch (error) {
    offerUndo(`Could not delete: ${error.message}`, null);
  }
}

async function undo() {
  const notes = state.undo;
  if (!notes) return;
  try {
    await bulkPut(notes);
    offerUndo(`Restored ${plural(notes.length, "note")}.`, null);
    state.undo = null;
    await load();
  } catch (error) {
    offerUndo(`Could not restore: ${error.message}`, notes);
  }
}

// --- wiring --------------------------------------------------------------------------------

function init() {
  const params = new URLSearchParams(location.search);
  table = new NotesTable({ onEdit: startEdit, onDelete: remove, onSelection: () => {} });
  initRange(params, () => state.range && load());
  $("view-metric").value = params.get("m") || "";
  $("view-tags").value = params.get("tags") || "";
  $("view-q").value = params.get("q") || "";
  resetForm();
  attachMetricSuggest($("view-metric"), $("metric-suggestions"));
  attachTagSuggest($("view-tags"), $("tag-suggestions"), $("view-metric"));
  $("view-form").addEventListener("submit", (event) => { event.preventDefault(); load(); });
  $("note-form").addEventListener("submit", submit);
  for (const radio of $("note-form").elements.scope) radio.addEventListener("change", syncScope);
  $("note-series").addEventListener("change", () => {
    state.seriesChoice = $("note-series").value;
  });
  $("note-cancel").addEventListener("click", resetForm);
  $("bulk-delete").addEventListener("click", () => remove(table.selectedNotes()));
  $("clear-selection").addEventListener("click", () => table.clearSelection());
  $("undo").addEventListener("click", undo);
  // Only a new width redraws: a height change (a phone's address bar) changes nothing drawn.
  let resizeTimer = null;
  let drawnWidth = window.innerWidth;
  window.addEventListener("resize", () => {
    if (window.innerWidth === drawnWidth) return;
    drawnWidth = window.innerWidth;
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => state.range && renderChart(), 150);
  });
  load();
}

init();
