// A small SVG chart: lines of series with their notes, or, with no series, a timeline of the
// notes in lanes (one per series, plus one for global notes). All text goes in as textContent.

import { drawNoteLanes, drawNoteRules, LABEL_BAND_PX } from "./notes-layer.js";
import { el } from "./svg.js";
import { fields, offsetMs } from "./time.js";

const MARGIN = { top: 22, right: 16, bottom: 28, left: 64 };
const LINE_HEIGHT_PX = 300;
const LANE_PX = 54;
// Series colours, chosen to be told apart; global notes have their own (see --global in CSS).
export const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#e8710a", "#0f8b9a", "#8c564b",
  "#c2188f", "#5f6368", "#8a8d00", "#393b79"];

/** Round tick values ("nice numbers") between lo and hi. */
function ticks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
  return out;
}

const TIME_STEPS_S = [1, 5, 10, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600,
  86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400];

/** Tick times on round wall-clock values of the chosen zone. */
function timeTicks(startMs, endMs, count) {
  const span = (endMs - startMs) / 1000 / count;
  const step = (TIME_STEPS_S.find((s) => s >= span) || TIME_STEPS_S.at(-1)) * 1000;
  const offset = offsetMs(startMs);
  const out = [];
  for (let t = Math.ceil((startMs + offset) / step) * step - offset; t <= endMs; t += step) {
    out.push(t);
  }
  return out;
}

const pad = (n) => String(n).padStart(2, "0");
function timeLabel(ms, spanMs) {
  const f = fields(ms);
  const hm = `${pad(f.hour)}:${pad(f.minute)}`;
  if (spanMs > 2 * 86400000) return `${pad(f.month)}-${pad(f.day)} ${hm}`;
  return spanMs < 600000 ? `${hm}:${pad(f.second)}` : hm;
}

export function valueLabel(v) {
  const a = Math.abs(v);
  if (a >= 1e12) return `${+(v / 1e12).toFixed(1)}T`;
  if (a >= 1e9) return `${+(v / 1e9).toFixed(1)}G`;
  if (a >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (a >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  return String(+v.toFixed(3));
}

function drawTimeAxis(axes, x, box, range) {
  const span = range.endMs - range.startMs;
  for (const t of timeTicks(range.startMs, range.endMs, Math.max(2, box.width / 110))) {
    axes.append(el("line", { x1: x(t), x2: x(t), y1: box.top, y2: box.bottom, class: "grid" }));
    // Keep the first and last labels inside the chart rather than cut at its edges.
    const anchor = x(t) > box.right - 40 ? "end" : x(t) < box.left + 40 ? "start" : "middle";
    axes.append(el("text", { x: x(t), y: box.bottom + 18, "text-anchor": anchor },
      timeLabel(t, span)));
  }
  axes.append(el("rect", { x: box.left, y: box.top, width: box.width, height: box.height,
    class: "frame" }));
}

function drawValueAxis(axes, y, box, yTicks) {
  for (const v of yTicks) {
    axes.append(el("line", { x1: box.left, x2: box.right, y1: y(v), y2: y(v), class: "grid" }));
    axes.append(el("text", { x: box.left - 6, y: y(v) + 4, "text-anchor": "end" },
      valueLabel(v)));
  }
}

const finite = (v) => v !== null && Number.isFinite(v);

/**
 * The runs of consecutive finite values of a series: a null or NaN (fill "null"/"nan") breaks
 * the line, as it means "no value here".
 */
export function segments(points) {
  const out = [];
  let run = [];
  for (const point of points) {
    if (finite(point[1])) {
      run.push(point);
    } else if (run.length) {
      out.push(run);
      run = [];
    }
  }
  if (run.length) out.push(run);
  return out;
}

/** Lines for runs of two or more points; a dot for a point alone (a path of one move is
 * invisible, so a one-point series would not show at all). */
function drawLines(svg, x, y, series) {
  const group = el("g", { class: "lines" });
  for (const s of series) {
    const runs = segments(s.points);
    const lines = runs.filter((run) => run.length > 1);
    if (lines.length) {
      const d = lines.map((run) => run.map(([t, v], j) => `${j ? "L" : "M"}${x(t).toFixed(1)},`
        + `${y(v).toFixed(1)}`).join("")).join("");
      const path = el("path", { d, stroke: s.color, class: "line", "data-series": s.label });
      path.append(el("title", {}, s.label));
      group.append(path);
    }
    for (const [[t, v]] of runs.filter((run) => run.length === 1)) {
      const dot = el("circle", { cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 3.5, fill: s.color,
        class: "dot", "data-series": s.label });
      dot.append(el("title", {}, `${s.label}: ${valueLabel(v)}`));
      group.append(dot);
    }
  }
  svg.append(group);
}

function valueScale(series, box) {
  const values = series.flatMap((s) => s.points.map(([, v]) => v)).filter(finite);
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (lo > 0 && lo < hi / 2) lo = 0;
  if (hi === lo) [lo, hi] = [lo - 1, hi + 1];
  const yTicks = ticks(lo, hi, 5);
  lo = Math.min(lo, yTicks[0]);
  hi = Math.max(hi, yTicks.at(-1));
  return { yTicks, y: (v) => box.bottom - ((v - lo) / (hi - lo)) * box.height };
}

function frame(svg, height) {
  const width = Math.max(300, Math.round(svg.parentElement.clientWidth || 800));
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
  for (const node of [...svg.childNodes]) if (node.nodeName !== "title") node.remove();
  return width;
}

const hasPoints = (s) => s.points.some(([, v]) => finite(v));

/** Clear the chart (after a failed query: no stale lines under the error). */
export function clearChart(svg) {
  frame(svg, 0);
}

/**
 * Draw series ({label, color, points: [[ms, value]]}) with their notes ({key, tsuid, owner,
 * color, startMs, endMs, description}) over range {startMs, endMs}; with no series, the notes
 * alone on a timeline; with neither, nothing. Returns {mode, unlabelled, plot}: mode is
 * "lines", "timeline" or "empty"; unlabelled counts the notes shown by their marker and
 * tooltip only; plot ({box, x, msAt, y}) places things on the lines for hover and zoom.
 */
export function drawChart(svg, { series, notes, range, onSelect, tooltip }) {
  const span = Math.max(1, range.endMs - range.startMs);
  const drawn = series.filter(hasPoints);
  const visible = notes.filter((n) => n.startMs >= range.startMs && n.startMs <= range.endMs);
  if (!drawn.length && !visible.length) {
    frame(svg, 0);
    return { mode: "empty", unlabelled: 0, plot: null };
  }
  const lanes = drawn.length ? [] : [...new Set(visible.map((n) => n.owner))]
    .sort((a, b) => (a === "Global" ? -1 : b === "Global" ? 1 : a.localeCompare(b)));
  // Over lines, note labels get a band of their own above the plot: never over a line.
  const top = drawn.length ? (visible.length ? LABEL_BAND_PX : MARGIN.top) : 12;
  const height = drawn.length ? LINE_HEIGHT_PX + top - MARGIN.top
    : MARGIN.top + lanes.length * LANE_PX + MARGIN.bottom - 10;
  const width = frame(svg, height);
  const left = drawn.length ? MARGIN.left : 12;
  const box = { left, top, right: width - MARGIN.right, bottom: height - MARGIN.bottom };
  box.width = box.right - box.left;
  box.height = box.bottom - box.top;
  const x = (t) => box.left + ((t - range.startMs) / span) * box.width;
  const msAt = (px) => range.startMs + ((px - box.left) / box.width) * span;
  const axes = el("g", { class: "axes", "aria-hidden": "true" });
  svg.append(axes);
  drawTimeAxis(axes, x, box, range);
  const context = { svg, x, box, notes: visible, onSelect, tooltip, endMs: range.endMs };
  if (!drawn.length) {
    return { mode: "timeline", plot: null,
      unlabelled: drawNoteLanes({ ...context, lanes, laneHeight: LANE_PX }) };
  }
  const { y, yTicks } = valueScale(drawn, box);
  drawValueAxis(axes, y, box, yTicks);
  drawLines(svg, x, y, drawn);
  return { mode: "lines", unlabelled: drawNoteRules(context),
    plot: { box, x, y, msAt, series: drawn } };
}
