// A small SVG line chart with the notes drawn on it. All text goes in through textContent.

import { formatTime } from "./time.js";

const SVG = "http://www.w3.org/2000/svg";
const MARGIN = { top: 18, right: 16, bottom: 28, left: 64 };
export const COLORS = ["#1f6fb2", "#c2410c", "#15803d", "#7e22ce", "#b45309", "#0e7490",
  "#be123c", "#4d7c0f"];

function el(name, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

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

const TIME_STEPS_S = [60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400,
  2 * 86400, 7 * 86400];

function timeTicks(startMs, endMs, count) {
  const span = (endMs - startMs) / 1000 / count;
  const step = (TIME_STEPS_S.find((s) => s >= span) || TIME_STEPS_S.at(-1)) * 1000;
  const offset = new Date(startMs).getTimezoneOffset() * 60000;
  const out = [];
  for (let t = Math.ceil((startMs - offset) / step) * step + offset; t <= endMs; t += step) {
    out.push(t);
  }
  return out;
}

const pad = (n) => String(n).padStart(2, "0");
function timeLabel(ms, spanMs) {
  const d = new Date(ms);
  const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return spanMs > 2 * 86400000 ? `${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${hm}` : hm;
}

function valueLabel(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return `${+(v / 1e9).toFixed(1)}G`;
  if (a >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (a >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  return String(+v.toFixed(2));
}

function drawAxes(svg, x, y, box, range, yTicks) {
  const axes = el("g", { class: "axes", "aria-hidden": "true" });
  for (const v of yTicks) {
    axes.append(el("line", { x1: box.left, x2: box.right, y1: y(v), y2: y(v), class: "grid" }));
    axes.append(el("text", { x: box.left - 6, y: y(v) + 4, "text-anchor": "end" },
      valueLabel(v)));
  }
  const span = range.endMs - range.startMs;
  for (const t of timeTicks(range.startMs, range.endMs, Math.max(2, box.width / 110))) {
    axes.append(el("line", { x1: x(t), x2: x(t), y1: box.top, y2: box.bottom, class: "grid" }));
    axes.append(el("text", { x: x(t), y: box.bottom + 18, "text-anchor": "middle" },
      timeLabel(t, span)));
  }
  axes.append(el("rect", { x: box.left, y: box.top, width: box.width, height: box.height,
    class: "frame" }));
  svg.append(axes);
}

function drawLines(svg, x, y, series) {
  const group = el("g", { class: "lines" });
  series.forEach((s, i) => {
    const points = s.points.filter(([, v]) => v !== null && Number.isFinite(v));
    if (!points.length) return;
    const d = points.map(([t, v], j) => `${j ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`);
    group.append(el("path", { d: d.join(""), stroke: COLORS[i % COLORS.length],
      class: "line", "data-series": s.label }));
  });
  svg.append(group);
}

const LABEL_CHARS = 24;
const LABEL_PX_PER_CHAR = 6;

function drawNotes(svg, x, box, range, notes, onSelect) {
  const group = el("g", { class: "notes" });
  const shown = notes.filter((n) => n.startMs >= range.startMs && n.startMs <= range.endMs);
  shown.forEach((note, i) => {
    const kind = note.tsuid ? "series" : "global";
    const x0 = x(note.startMs);
    const room = (i + 1 < shown.length ? x(shown[i + 1].startMs) : box.right) - x0 - 10;
    const marker = el("g", { class: `note note-${kind}`, tabindex: "0", role: "button",
      "data-note": note.key });
    marker.setAttribute("aria-label", `${kind === "global" ? "Global" : "Series"} note: `
      + `${note.description} at ${formatTime(note.startMs)}`);
    if (note.endMs > note.startMs) {
      const x1 = x(Math.min(note.endMs, range.endMs));
      marker.append(el("rect", { x: x0, y: box.top, width: Math.max(1, x1 - x0),
        height: box.height, class: "span" }));
    }
    marker.append(el("line", { x1: x0, x2: x0, y1: box.top, y2: box.bottom, class: "rule" }));
    // A wider, invisible target than the 1.5 px rule, so the marker is easy to click.
    marker.append(el("rect", { x: x0 - 6, y: box.top - 12, width: 12, height: box.height + 12,
      class: "hit" }));
    marker.append(el("path", { d: `M${x0 - 6},${box.top - 12}h12l-6,10z`, class: "flag" }));
    marker.append(el("title", {}, note.description));
    const chars = Math.min(LABEL_CHARS, Math.floor(room / LABEL_PX_PER_CHAR));
    if (chars >= 6) {
      const label = note.description.length > chars
        ? `${note.description.slice(0, chars - 1)}…` : note.description;
      marker.append(el("text", { x: x0 + 5, y: box.top + 12, class: "label" }, label));
    }
    marker.addEventListener("click", () => onSelect(note));
    marker.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        onSelect(note);
      }
    });
    group.append(marker);
  });
  svg.append(group);
}

/**
 * Draw series ({label, points: [[ms, value]]}) and notes ({key, tsuid, startMs, endMs,
 * description}) over range {startMs, endMs}. onSelect(note) runs when a note is activated.
 */
export function drawChart(svg, { series, notes, range, onSelect }) {
  const width = Math.max(320, Math.round(svg.clientWidth || 800));
  const height = 280;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  for (const node of [...svg.childNodes]) if (node.nodeName !== "title") node.remove();
  const box = { left: MARGIN.left, top: MARGIN.top, right: width - MARGIN.right,
    bottom: height - MARGIN.bottom };
  box.width = box.right - box.left;
  box.height = box.bottom - box.top;
  const values = series.flatMap((s) => s.points.map(([, v]) => v))
    .filter((v) => v !== null && Number.isFinite(v));
  let lo = values.length ? Math.min(...values) : 0;
  let hi = values.length ? Math.max(...values) : 1;
  if (lo > 0 && lo < hi / 2) lo = 0;
  if (hi === lo) hi = lo + 1;
  const yTicks = ticks(lo, hi, 5);
  lo = Math.min(lo, yTicks[0]);
  hi = Math.max(hi, yTicks.at(-1));
  const span = Math.max(1, range.endMs - range.startMs);
  const x = (t) => box.left + ((t - range.startMs) / span) * box.width;
  const y = (v) => box.bottom - ((v - lo) / (hi - lo)) * box.height;
  drawAxes(svg, x, y, box, range, yTicks);
  drawLines(svg, x, y, series);
  drawNotes(svg, x, box, range, notes, onSelect);
}
