// Over a line chart drawn by chart.js: a crosshair with every series' value at the pointer's
// time, and drag-to-zoom (a drag across the plot picks a new range).

import { valueLabel } from "./chart.js";
import { el } from "./svg.js";
import { formatTime } from "./time.js";

const MIN_DRAG_PX = 6;
const MAX_ROWS = 12;

/** The index in sorted points [[ms, v]] of the point nearest to t. */
function nearestIndex(points, t) {
  let lo = 0;
  let hi = points.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (points[mid][0] < t) lo = mid + 1; else hi = mid;
  }
  return lo > 0 && t - points[lo - 1][0] <= points[lo][0] - t ? lo - 1 : lo;
}

const finitePoints = new WeakMap();
function pointsOf(series) {
  if (!finitePoints.has(series)) {
    finitePoints.set(series, series.points.filter(([, v]) => v !== null && Number.isFinite(v)));
  }
  return finitePoints.get(series);
}

/** Each series' point nearest to time t, and the time of the nearest of them all. */
export function valuesAt(series, t) {
  const found = series.map((s) => {
    const points = pointsOf(s);
    return { series: s, point: points.length ? points[nearestIndex(points, t)] : null };
  }).filter((f) => f.point);
  if (!found.length) return { atMs: t, found };
  const atMs = found.reduce((best, f) => (Math.abs(f.point[0] - t) < Math.abs(best - t)
    ? f.point[0] : best), found[0].point[0]);
  const exact = series.map((s) => {
    const points = pointsOf(s);
    return { series: s, point: points.length ? points[nearestIndex(points, atMs)] : null };
  }).filter((f) => f.point);
  return { atMs, found: exact };
}

function row(series, point, atMs) {
  const line = document.createElement("span");
  line.className = "value-row";
  line.style.setProperty("--swatch", series.color); // CSSOM: CSP-safe
  const name = document.createElement("span");
  name.className = "value-name";
  name.textContent = series.label;
  const value = document.createElement("span");
  value.className = "value";
  value.textContent = point[0] === atMs ? valueLabel(point[1])
    : `${valueLabel(point[1])} at ${formatTime(point[0])}`;
  line.append(name, value);
  return line;
}

function showValues(tooltip, found, atMs, xPx, yPx) {
  const title = document.createElement("strong");
  title.textContent = formatTime(atMs);
  const rows = found.slice(0, MAX_ROWS).map((f) => row(f.series, f.point, atMs));
  if (found.length > MAX_ROWS) {
    const more = document.createElement("span");
    more.textContent = `… and ${found.length - MAX_ROWS} more`;
    rows.push(more);
  }
  tooltip.replaceChildren(title, ...rows);
  tooltip.hidden = false;
  const room = tooltip.parentElement.clientWidth;
  const left = xPx + 14 + tooltip.offsetWidth > room ? xPx - 14 - tooltip.offsetWidth : xPx + 14;
  tooltip.style.left = `${Math.max(0, left)}px`;
  tooltip.style.top = `${yPx}px`;
}

function layer(svg) {
  let group = svg.querySelector("g.hover");
  if (!group) {
    group = el("g", { class: "hover", "aria-hidden": "true" });
    svg.append(group);
  }
  return group;
}

/**
 * Wire hover and zoom once; getPlot() gives the current plot ({box, x, y, msAt, series}) or
 * null; onZoom(startMs, endMs) is called after a drag of at least a few pixels.
 */
export function attachPlot(svg, tooltip, { getPlot, onZoom }) {
  let drag = null;
  const svgX = (event) => {
    const rect = svg.getBoundingClientRect();
    const scale = rect.width ? svg.viewBox.baseVal.width / rect.width : 1;
    return { x: (event.clientX - rect.left) * scale, y: (event.clientY - rect.top) * scale };
  };
  const inside = (box, p) => p.x >= box.left && p.x <= box.right && p.y >= box.top
    && p.y <= box.bottom;
  const clear = () => {
    svg.querySelector("g.hover")?.replaceChildren();
    tooltip.hidden = true;
  };
  svg.addEventListener("pointermove", (event) => {
    const plot = getPlot();
    const p = svgX(event);
    if (!plot || (!drag && (!inside(plot.box, p) || event.target.closest(".note")))) {
      clear();
      return;
    }
    const { box, x, y } = plot;
    const group = layer(svg);
    group.replaceChildren();
    if (drag) {
      const x0 = Math.max(box.left, Math.min(drag.x, p.x));
      const x1 = Math.min(box.right, Math.max(drag.x, p.x));
      group.append(el("rect", { x: x0, y: box.top, width: x1 - x0, height: box.height,
        class: "zoom-band" }));
      tooltip.hidden = true;
      return;
    }
    const { atMs, found } = valuesAt(plot.series, plot.msAt(p.x));
    group.append(el("line", { x1: x(atMs), x2: x(atMs), y1: box.top, y2: box.bottom,
      class: "crosshair" }));
    for (const f of found) {
      group.append(el("circle", { cx: x(f.point[0]), cy: y(f.point[1]), r: 4,
        stroke: f.series.color, class: "hover-dot" }));
    }
    showValues(tooltip, found, atMs, x(atMs), Math.max(0, p.y - 20));
  });
  svg.addEventListener("pointerleave", () => { if (!drag) clear(); });
  svg.addEventListener("pointerdown", (event) => {
    const plot = getPlot();
    const p = svgX(event);
    if (event.button !== 0 || !plot || !inside(plot.box, p) || event.target.closest(".note")) {
      return;
    }
    event.preventDefault(); // no text selection while dragging
    svg.setPointerCapture(event.pointerId);
    drag = { x: p.x };
  });
  svg.addEventListener("pointerup", (event) => {
    if (!drag) return;
    const plot = getPlot();
    const p = svgX(event);
    const from = drag.x;
    drag = null;
    clear();
    if (!plot || Math.abs(p.x - from) < MIN_DRAG_PX) return;
    const { box } = plot;
    const x0 = Math.max(box.left, Math.min(from, p.x));
    const x1 = Math.min(box.right, Math.max(from, p.x));
    onZoom(Math.round(plot.msAt(x0)), Math.round(plot.msAt(x1)));
  });
}
