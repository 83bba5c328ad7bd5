// Notes on the chart: markers, labels placed so that they never overlap (a label that has no
// room is left out, and the marker's tooltip tells the note), and the tooltip itself.

import { el } from "./svg.js";
import { formatTime } from "./time.js";

const LABEL_ROWS = 3;
const ROW_PX = 14;
const CHAR_PX = 6.4; // 11 px system-ui, an average glyph
const LABEL_CHARS = 28;
const MIN_CHARS = 8;
const GAP_PX = 6;
const FLAG_PX = 10;
/** The band above a line chart that holds the note labels (so no label covers a line). */
export const LABEL_BAND_PX = LABEL_ROWS * ROW_PX + FLAG_PX + 8;

function labelText(description, chars) {
  return description.length > chars ? `${description.slice(0, chars - 1)}…` : description;
}

/**
 * Put a label at x0 in the first row whose last label ends before it; shorten it to the room
 * left before the right edge. Returns {row, text} or null when no row has room.
 */
function placeLabel(rowEnds, x0, description, rightPx) {
  const chars = Math.min(LABEL_CHARS, description.length,
    Math.floor((rightPx - x0 - GAP_PX) / CHAR_PX));
  if (chars < Math.min(MIN_CHARS, description.length)) return null;
  const row = rowEnds.findIndex((end) => end + GAP_PX <= x0);
  if (row < 0) return null;
  const text = labelText(description, chars);
  rowEnds[row] = x0 + GAP_PX + text.length * CHAR_PX;
  return { row, text };
}

const NEAR_PX = 6; // markers closer than this share the pointer: the tooltip lists them all

function noteLines(note) {
  const when = document.createElement("span");
  when.textContent = note.endMs > note.startMs
    ? `${formatTime(note.startMs)} → ${formatTime(note.endMs)}` : formatTime(note.startMs);
  const owner = document.createElement("span");
  owner.textContent = note.owner;
  return [when, owner];
}

function clusterLines(notes) {
  const title = document.createElement("strong");
  title.textContent = `${notes.length} notes here`;
  return [title, ...notes.map((note) => {
    const line = document.createElement("span");
    line.textContent = `${formatTime(note.startMs)} ${note.description} (${note.owner})`;
    return line;
  })];
}

/** One note (keyboard focus is precise), or every note within reach of the pointer. */
function showTooltip(tooltip, notes, xPx, yPx) {
  if (notes.length === 1) {
    const title = document.createElement("strong");
    title.textContent = notes[0].description;
    tooltip.replaceChildren(title, ...noteLines(notes[0]));
  } else {
    tooltip.replaceChildren(...clusterLines(notes));
  }
  tooltip.hidden = false;
  // CSSOM, not a style attribute: allowed under a strict Content-Security-Policy.
  const maxLeft = tooltip.parentElement.clientWidth - tooltip.offsetWidth - 4;
  tooltip.style.left = `${Math.max(0, Math.min(xPx + 8, maxLeft))}px`;
  tooltip.style.top = `${yPx}px`;
}

function marker(note, context, tipY) {
  const { onSelect, tooltip, x } = context;
  const kind = note.tsuid ? "series" : "global";
  const node = el("g", { class: `note note-${kind}`, tabindex: "0", role: "button",
    "data-note": note.key });
  if (note.tsuid) {
    node.setAttribute("stroke", note.color);
    node.setAttribute("fill", note.color);
  }
  node.setAttribute("aria-label", `${kind === "global" ? "Global" : "Series"} note: `
    + `${note.description} at ${formatTime(note.startMs)}, ${note.owner}`);
  node.append(el("title", {}, note.description));
  const x0 = x(note.startMs);
  const near = () => context.notes.filter((n) => Math.abs(x(n.startMs) - x0) <= NEAR_PX
    && (!context.lanes || n.owner === note.owner));
  const show = (notes) => tooltip && showTooltip(tooltip, notes, x0, tipY);
  const hide = () => { if (tooltip) tooltip.hidden = true; };
  node.addEventListener("mouseenter", () => show(near()));
  node.addEventListener("focus", () => show([note]));
  node.addEventListener("mouseleave", hide);
  node.addEventListener("blur", hide);
  node.addEventListener("click", () => onSelect(note));
  node.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      onSelect(note);
    }
  });
  return node;
}

function span(note, x, endMs, top, height) {
  const x0 = x(note.startMs);
  const x1 = x(Math.min(note.endMs, endMs));
  return el("rect", { x: x0, y: top, width: Math.max(1, x1 - x0), height, class: "span" });
}

/** Notes over series lines: a rule from top to bottom, a flag, a label in one of 3 rows of
 * the band above the plot. */
export function drawNoteRules(context) {
  const { svg, x, box, notes } = context;
  const group = el("g", { class: "notes" });
  const rowEnds = new Array(LABEL_ROWS).fill(-Infinity);
  let unlabelled = 0;
  for (const note of notes) {
    const x0 = x(note.startMs);
    const node = marker(note, context, box.top + 4);
    if (note.endMs > note.startMs) node.append(span(note, x, context.endMs, box.top, box.height));
    node.append(el("line", { x1: x0, x2: x0, y1: box.top, y2: box.bottom, class: "rule" }));
    // A wider, invisible target than the 1.5 px rule, so the marker is easy to hit.
    node.append(el("rect", { x: x0 - 6, y: box.top - FLAG_PX, width: 12,
      height: box.height + FLAG_PX, class: "hit" }));
    node.append(el("path", { d: `M${x0 - 6},${box.top - FLAG_PX}h12l-6,${FLAG_PX}z`,
      class: "flag" }));
    const label = placeLabel(rowEnds, x0, note.description, box.right);
    if (label) {
      // Row 0 just above the flags, further rows upwards.
      node.append(el("text", { x: x0 + 5, y: box.top - FLAG_PX - 4 - label.row * ROW_PX,
        class: "label" }, label.text));
    } else {
      unlabelled += 1;
    }
    group.append(node);
  }
  svg.append(group);
  return unlabelled;
}

/** Notes alone: one lane per owner (global, then each series), labels in two rows. */
export function drawNoteLanes(context) {
  const { svg, x, box, notes, lanes, laneHeight } = context;
  const group = el("g", { class: "notes lanes" });
  const rowEnds = new Map(lanes.map((owner) => [owner, [-Infinity, -Infinity]]));
  let unlabelled = 0;
  lanes.forEach((owner, index) => {
    const top = box.top + index * laneHeight;
    if (index) group.append(el("line", { x1: box.left, x2: box.right, y1: top, y2: top, class: "lane-rule" }));
    group.append(el("text", { x: box.left + 4, y: top + 12, class: "lane-name" }, owner));
  });
  for (const note of notes) {
    const top = box.top + lanes.indexOf(note.owner) * laneHeight;
    const x0 = x(note.startMs);
    const node = marker(note, context, top + laneHeight);
    if (note.endMs > note.startMs) node.append(span(note, x, context.endMs, top + 16, laneHeight - 20));
    node.append(el("line", { x1: x0, x2: x0, y1: top + 16, y2: top + laneHeight - 4, class: "rule" }));
    node.append(el("rect", { x: x0 - 6, y: top + 14, width: 12, height: laneHeight - 16, class: "hit" }));
    node.append(el("path", { d: `M${x0},${top + 15}l5,5l-5,5l-5,-5z`, class: "flag" }));
    const label = placeLabel(rowEnds.get(note.owner), x0, note.description, box.right);
    if (label) {
      node.append(el("text", { x: x0 + 7, y: top + 36 + label.row * 13, class: "label" },
        label.text));
    } else {
      unlabelled += 1;
    }
    group.append(node);
  }
  svg.append(group);
  return unlabelled;
}
