// The create / edit form: validation, then PUT (and DELETE when a note moves).

import { apiTime, deleteNote, noteExists, putNote } from "../common/api.js";
import { parseTime, timeProblem } from "../common/time.js";

export function customText(custom) {
  return custom ? Object.entries(custom).map(([k, v]) => `${k}=${v}`).join("\n") : "";
}

function parseCustom(text, errors) {
  const custom = {};
  text.split("\n").forEach((line, index) => {
    if (!line.trim()) return;
    const eq = line.indexOf("=");
    const key = eq > 0 ? line.slice(0, eq).trim() : "";
    if (!key) {
      errors.push({ field: "note-custom", message: `Custom fields: line ${index + 1} is not key=value.` });
    } else if (key in custom) {
      errors.push({ field: "note-custom", message: `Custom fields: the key “${key}” appears twice.` });
    } else {
      custom[key] = line.slice(eq + 1).trim();
    }
  });
  return Object.keys(custom).length ? custom : null;
}

/** Read and check the form; returns {note, startMs, errors}. */
export function readForm(form) {
  const errors = [];
  const scope = form.elements.scope.value;
  const tsuid = scope === "series" ? form.elements.tsuid.value : "";
  if (scope === "series" && !tsuid) {
    errors.push({ field: "note-series", message: "Choose a series, or make the note global." });
  }
  const startMs = parseTime(form.elements.start.value);
  const startProblem = timeProblem("Start", form.elements.start.value);
  if (startProblem || startMs < 1000) {
    errors.push({ field: "note-start", message: startProblem || "Start: a time after 1970." });
  }
  const endMs = parseTime(form.elements.end.value);
  if (form.elements.end.value.trim() && !Number.isFinite(endMs)) {
    errors.push({ field: "note-end",
      message: `${timeProblem("End", form.elements.end.value)} Or leave it empty.` });
  } else if (Number.isFinite(endMs) && Number.isFinite(startMs) && endMs < startMs) {
    errors.push({ field: "note-end", message: "The end must not be before the start." });
  }
  const description = form.elements.description.value.trim();
  if (!description) errors.push({ field: "note-description", message: "Enter a description." });
  const custom = parseCustom(form.elements.custom.value, errors);
  const note = { startTime: apiTime(startMs), endTime: Number.isFinite(endMs) ? apiTime(endMs) : 0,
    description, notes: form.elements.notes.value, custom };
  if (tsuid) note.tsuid = tsuid;
  return { note, startMs, errors };
}

/**
 * Save: a new note must not overwrite another one at the same time; an edited note that
 * changed its start or series is written anew and the old one deleted.
 */
export async function saveNote(note, startMs, original) {
  const moved = !original || original.tsuid !== (note.tsuid || "") || original.startMs !== startMs;
  if (moved && await noteExists(note.tsuid || "", startMs)) {
    throw new Error("Another note already starts at this time for this series: edit that one instead.");
  }
  const result = await putNote(note);
  if (original && moved) await deleteNote(original.tsuid, original.startTime);
  return result;
}
