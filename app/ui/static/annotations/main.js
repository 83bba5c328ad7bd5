// The annotation manager: range + series + search -> table and chart; create, edit, delete.

import { deleteNote, listNotes, querySeries, toMs } from "./api.js";
import { COLORS, drawChart } from "./chart.js";
import { customText, readForm, saveNote, showErrors } from "./form.js";
import { formatTime, fromLocalInput, toLocalInput } from "./time.js";
import { attachMetricSuggest, attachTagSuggest } from "./suggest.js";

const $ = (id) => document.getElementById(id);
const PRESETS_MS = { "1h": 3600e3, "6h": 6 * 3600e3, "24h": 86400e3, "7d": 7 * 86400e3,
  "30d": 30 * 86400e3 };
const MAX_LINES = 20;
const state = { range: null, metric: "", tags: "", series: [], notes: [], editing: null };

function status(message) {
  $("status").textContent = message;
}

function seriesLabel(metric, tags) {
  const pairs = Object.entries(tags || {}).map(([k, v]) => `${k}=${v}`).join(",");
  return pairs ? `${metric}{${pairs}}` : metric;
}

// --- the view ------------------------------------------------------------------------------

function applyPreset() {
  const preset = $("range-preset").value;
  if (!(preset in PRESETS_MS)) return;
  const endMs = Math.floor(Date.now() / 1000) * 1000;
  $("range-start").value = toLocalInput(endMs - PRESETS_MS[preset]);
  $("range-end").value = toLocalInput(endMs);
}

function readView() {
  const errors = [];
  if ($("range-preset").value !== "custom") applyPreset();
  const startMs = fromLocalInput($("range-start").value);
  const endMs = fromLocalInput($("range-end").value);
  if (!Number.isFinite(startMs)) errors.push({ field: "range-start", message: "Enter a start time." });
  if (!Number.isFinite(endMs)) errors.push({ field: "range-end", message: "Enter an end time." });
  if (!errors.length && endMs <= startMs) {
    errors.push({ field: "range-end", message: "The end must be after the start." });
  }
  const tags = $("view-tags").value.split(",").map((t) => t.trim()).filter(Boolean).join(",");
  if (tags && !$("view-metric").value.trim()) {
    errors.push({ field: "view-metric", message: "Tags need a metric." });
  }
  return { errors, range: { startMs, endMs }, metric: $("view-metric").value.trim(), tags,
    q: $("view-q").value.trim() };
}

function remember(view) {
  const params = new URLSearchParams();
  const preset = $("range-preset").value;
  if (preset === "custom") {
    params.set("start", String(view.range.startMs));
    params.set("end", String(view.range.endMs));
  } else {
    params.set("range", preset);
  }
  if (view.metric) params.set("m", view.metric);
  if (view.tags) params.set("tags", view.tags);
  if (view.q) params.set("q", view.q);
  history.replaceState(null, "", `?${params}`);
}

function restore() {
  const params = new URLSearchParams(location.search);
  if (params.has("start")) {
    $("range-preset").value = "custom";
    $("range-start").value = toLocalInput(Number(params.get("start")));
    $("range-end").value = toLocalInput(Number(params.get("end") || Date.now()));
  } else {
    if (params.get("range") in PRESETS_MS) $("range-preset").value = params.get("range");
    applyPreset();
  }
  $("view-metric").value = params.get("m") || "";
  $("view-tags").value = params.get("tags") || "";
  $("view-q").value = params.get("q") || "";
}

function toSeries(result) {
  const points = Object.entries(result.dps || {}).map(([t, v]) => [Number(t), v])
    .sort((a, b) => a[0] - b[0]);
  return { label: seriesLabel(result.metric, result.tags), tsuid: (result.tsuids || [])[0],
    points };
}

function toNote(raw) {
  const startMs = toMs(raw.startTime);
  return { ...raw, key: `${raw.tsuid}|${raw.startTime}`, startMs,
    endMs: raw.endTime ? toMs(raw.endTime) : 0,
    label: raw.tsuid ? seriesLabel(raw.metric || raw.tsuid, raw.tags) : "Global" };
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
    state.notes = listing.annotations.map(toNote);
    state.series = results.map(toSeries);
    render(listing);
    status(`Showing ${state.notes.length} note${state.notes.length === 1 ? "" : "s"}.`);
  } catch (error) {
    showErrors($("view-form"), $("view-errors"), [{ field: null, message: error.message }]);
    status("");
  }
}

// --- rendering -----------------------------------------------------------------------------

function render(listing) {
  renderChart();
  renderTable(listing);
  renderSeriesChoices();
}

function renderChart() {
  const shown = state.series.slice(0, MAX_LINES);
  drawChart($("chart"), { series: shown, notes: state.notes, range: state.range,
    onSelect: startEdit });
  $("chart-legend").replaceChildren(...shown.map((s, i) => {
    const item = document.createElement("li");
    item.style.setProperty("--swatch", COLORS[i % COLORS.length]);
    item.textContent = s.label;
    return item;
  }));
  const what = state.metric ? seriesLabel(state.metric, null) + (state.tags ? `{${state.tags}}` : "")
    : "No series chosen";
  const more = state.series.length > MAX_LINES ? ` (the first ${MAX_LINES} drawn)` : "";
  $("chart-summary").textContent = `${what}: ${state.series.length} series${more}, `
    + `${state.notes.length} notes.`;
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function button(label, accessibleName, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.setAttribute("aria-label", accessibleName);
  b.addEventListener("click", onClick);
  return b;
}

function renderTable(listing) {
  const rows = state.notes.map((note) => {
    const tr = document.createElement("tr");
    tr.dataset.note = note.key;
    const actions = document.createElement("td");
    actions.className = "row-actions";
    actions.append(button("Edit", `Edit note ${note.description}`, () => startEdit(note)),
      button("Delete", `Delete note ${note.description}`, () => remove(note)));
    tr.append(cell(formatTime(note.startMs), "time"),
      cell(note.endMs ? formatTime(note.endMs) : "", "time"),
      cell(note.label, note.tsuid ? "scope-series" : "scope-global"),
      cell(note.description), cell(note.notes, "pre"),
      cell(customText(note.custom).replaceAll("\n", "; ")), actions);
    return tr;
  });
  $("notes-body").replaceChildren(...rows);
  $("notes-empty").hidden = rows.length > 0;
  const truncated = listing.truncated ? ` (first ${rows.length} of ${listing.total})` : "";
  $("notes-caption").textContent = `${rows.length} note${rows.length === 1 ? "" : "s"} `
    + `from ${formatTime(state.range.startMs)} to ${formatTime(state.range.endMs)}${truncated}`;
}

function renderSeriesChoices(extra = null) {
  const select = $("note-series");
  const choices = state.series.filter((s) => s.tsuid).map((s) => [s.tsuid, s.label]);
  if (extra && !choices.some(([tsuid]) => tsuid === extra.tsuid)) {
    choices.push([extra.tsuid, extra.label]);
  }
  const current = select.value;
  select.replaceChildren(...choices.map(([tsuid, label]) => {
    const option = document.createElement("option");
    option.value = tsuid;
    option.textContent = label;
    return option;
  }));
  if (choices.some(([tsuid]) => tsuid === current)) select.value = current;
  syncScope();
}

function syncScope() {
  const series = $("note-form").elements.scope.value === "series";
  $("note-series").disabled = !series;
}

// --- editing -------------------------------------------------------------------------------

function resetForm() {
  const form = $("note-form");
  form.reset();
  state.editing = null;
  form.elements.start.value = toLocalInput(Math.floor(Date.now() / 1000) * 1000);
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
  if (note.tsuid) form.elements.tsuid.value = note.tsuid;
  form.elements.start.value = toLocalInput(note.startMs);
  form.elements.end.value = note.endMs ? toLocalInput(note.endMs) : "";
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

async function remove(note) {
  if (!window.confirm(`Delete the note “${note.description}”?`)) return;
  try {
    await deleteNote(note.tsuid, note.startTime);
    if (state.editing && state.editing.key === note.key) resetForm();
    status(`Deleted note “${note.description}”.`);
    await load();
  } catch (error) {
    status(`Could not delete the note: ${error.message}`);
  }
}

// --- wiring --------------------------------------------------------------------------------

function init() {
  restore();
  resetForm();
  attachMetricSuggest($("view-metric"), $("metric-suggestions"));
  attachTagSuggest($("view-tags"), $("tag-suggestions"));
  $("range-preset").addEventListener("change", applyPreset);
  for (const id of ["range-start", "range-end"]) {
    $(id).addEventListener("input", () => { $("range-preset").value = "custom"; });
  }
  $("view-form").addEventListener("submit", (event) => { event.preventDefault(); load(); });
  $("note-form").addEventListener("submit", submit);
  for (const radio of $("note-form").elements.scope) radio.addEventListener("change", syncScope);
  $("note-cancel").addEventListener("click", resetForm);
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => state.range && renderChart(), 150);
  });
  load();
}

init();
