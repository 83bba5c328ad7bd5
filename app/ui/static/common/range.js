// The time-range picker both pages share: a preset or From/To text, and the time zone.

import { ZONES, formatTime, getZone, parseTime, setZone, timeProblem, zoneLabel,
  zoneOptionText } from "./time.js";

const $ = (id) => document.getElementById(id);
export const PRESETS_MS = { "15m": 900e3, "1h": 3600e3, "6h": 6 * 3600e3, "24h": 86400e3,
  "7d": 7 * 86400e3, "30d": 30 * 86400e3 };
const ZONE_KEY = "pytsd.zone";

function applyPreset() {
  const preset = $("range-preset").value;
  if (!(preset in PRESETS_MS)) return;
  const endMs = Math.floor(Date.now() / 1000) * 1000;
  $("range-start").value = formatTime(endMs - PRESETS_MS[preset]);
  $("range-end").value = formatTime(endMs);
}

function showZone() {
  for (const node of document.querySelectorAll("[data-zone-label]")) {
    node.textContent = zoneLabel();
  }
}

function changeZone(onChange) {
  // Keep the same instants: read every time input in the old zone, write it in the new one.
  const inputs = [...document.querySelectorAll("input.time")];
  const times = inputs.map((input) => parseTime(input.value));
  setZone($("range-zone").value);
  try {
    localStorage.setItem(ZONE_KEY, getZone());
  } catch {
    // storage may be off (private mode): the choice then lasts for this page only
  }
  inputs.forEach((input, index) => {
    if (Number.isFinite(times[index])) input.value = formatTime(times[index]);
  });
  showZone();
  onChange();
}

function savedZone(params) {
  if (ZONES.includes(params.get("tz"))) return params.get("tz");
  try {
    return localStorage.getItem(ZONE_KEY) || "local";
  } catch {
    return "local";
  }
}

/** Set the picker from address parameters (range=24h | start=ms&end=ms). */
export function setRange(params) {
  if (params.has("start")) {
    $("range-preset").value = "custom";
    $("range-start").value = formatTime(Number(params.get("start")));
    $("range-end").value = formatTime(Number(params.get("end") || Date.now()));
  } else {
    $("range-preset").value = params.get("range") in PRESETS_MS ? params.get("range") : "24h";
    applyPreset();
  }
}

/** A chosen absolute range (a zoom): From/To, the preset "Custom". */
export function setCustomRange(startMs, endMs) {
  $("range-preset").value = "custom";
  $("range-start").value = formatTime(startMs);
  $("range-end").value = formatTime(endMs);
}

/**
 * Fill the picker from the address (range=24h | start=ms&end=ms, tz=utc|local) and wire it:
 * onChange runs after a new preset, a From/To edited and left, or a new zone.
 */
export function initRange(params, onChange) {
  const zoneSelect = $("range-zone");
  zoneSelect.replaceChildren(...ZONES.map((value) => {
    const option = document.createElement("option");
    option.value = value;
    option.textContent = zoneOptionText(value);
    return option;
  }));
  setZone(savedZone(params));
  zoneSelect.value = getZone();
  setRange(params);
  showZone();
  $("range-preset").addEventListener("change", () => {
    applyPreset();
    onChange();
  });
  for (const id of ["range-start", "range-end"]) {
    $(id).addEventListener("input", () => { $("range-preset").value = "custom"; });
    $(id).addEventListener("change", onChange);
  }
  zoneSelect.addEventListener("change", () => changeZone(onChange));
}

/** The chosen range ({startMs, endMs}) and the problems with it ({field, message}). */
export function readRange() {
  if ($("range-preset").value !== "custom") applyPreset();
  const errors = [];
  const startMs = parseTime($("range-start").value);
  const endMs = parseTime($("range-end").value);
  for (const [field, label] of [["range-start", "From"], ["range-end", "To"]]) {
    const problem = timeProblem(label, $(field).value);
    if (problem) errors.push({ field, message: problem });
  }
  if (!errors.length && endMs <= startMs) {
    errors.push({ field: "range-end", message: "The end must be after the start." });
  }
  return { range: { startMs, endMs }, errors };
}

/** Put the range and the zone into address parameters. */
export function rangeParams(params, range) {
  const preset = $("range-preset").value;
  if (preset === "custom") {
    params.set("start", String(range.startMs));
    params.set("end", String(range.endMs));
  } else {
    params.set("range", preset);
  }
  params.set("tz", getZone());
}
