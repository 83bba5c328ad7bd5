// Every HTTP call the pages make: the public API, plus pytsd's /ui/api helpers.

export class ApiError extends Error {
  constructor(status, message, details) {
    super(details ? `${message}: ${details}` : message);
    this.status = status;
  }
}

export async function request(url, options = {}) {
  const response = await fetch(url, {
    headers: { Accept: "application/json", ...(options.body ? { "Content-Type": "application/json" } : {}) },
    ...options,
  });
  if (response.status === 204 || response.status === 304) {
    return { status: response.status, body: null };
  }
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    throw new ApiError(response.status, `Unexpected answer from ${url}`);
  }
  if (!response.ok) {
    const error = (body && body.error) || {};
    throw new ApiError(response.status, error.message || response.statusText, error.details);
  }
  return { status: response.status, body };
}

/** OpenTSDB time text for a JavaScript millisecond time: explicit milliseconds. */
export const msText = (ms) => `${Math.round(ms)}ms`;

/** A note's start as sent to the API: seconds, or milliseconds when there are some. */
export const apiTime = (ms) => (ms % 1000 === 0 ? ms / 1000 : ms);

/** A stored startTime/endTime (seconds, or milliseconds when >= 2^32) in milliseconds. */
export const toMs = (ts) => (ts >= 2 ** 32 ? ts : ts * 1000);

/**
 * Notes in a range: with a metric, GET /api/annotation/list (global notes and the matching
 * series'); without one, GET /ui/api/notes (global notes and every series').
 */
export async function listNotes({ startMs, endMs, metric, tags, q }) {
  const params = new URLSearchParams({ start: msText(startMs), end: msText(endMs) });
  if (metric) params.append("m", tags ? `${metric}{${tags}}` : metric);
  if (q) params.set("q", q);
  const path = metric ? "/api/annotation/list" : "/ui/api/notes";
  const { body } = await request(`${path}?${params}`);
  return body;
}

/** A note as the write endpoints take it: without the listing's metric and tags. */
export function writable(note) {
  const out = { startTime: note.startTime, endTime: note.endTime || 0,
    description: note.description, notes: note.notes || "", custom: note.custom || null };
  if (note.tsuid) out.tsuid = note.tsuid;
  return out;
}

/**
 * Delete exactly these notes with DELETE /api/annotation/bulk. The endpoint deletes ranges,
 * so one call per start time, naming only the chosen series (and global when chosen): a note
 * is identified by (tsuid, start), so nothing else can match. Returns the count deleted.
 */
export async function bulkDelete(notes) {
  const byStart = new Map();
  for (const note of notes) {
    const group = byStart.get(note.startTime) || { tsuids: [], global: false };
    if (note.tsuid) group.tsuids.push(note.tsuid); else group.global = true;
    byStart.set(note.startTime, group);
  }
  let deleted = 0;
  for (const [startTime, group] of byStart) {
    const at = msText(toMs(startTime));
    const { body } = await request("/api/annotation/bulk", { method: "DELETE",
      body: JSON.stringify({ startTime: at, endTime: at, ...group }) });
    deleted += body.totalDeleted;
  }
  return deleted;
}

/** PUT /api/annotation/bulk: write these notes back as they were (the undo of a delete). */
export async function bulkPut(notes) {
  const { body } = await request("/api/annotation/bulk", { method: "PUT",
    body: JSON.stringify(notes.map(writable)) });
  return body;
}

/** GET /api/aggregators, sorted. */
export async function aggregators() {
  return ((await request("/api/aggregators")).body || []).slice().sort();
}

/** GET /ui/api/status: version, storage, UID counts, this worker's points written. */
export async function serverStatus() {
  return (await request("/ui/api/status")).body;
}

/** Is there a note at exactly (tsuid, startMs)? Asked through the listing, which answers
 * 200 either way (a 404 from GET /api/annotation would log a console error). */
export async function noteExists(tsuid, startMs) {
  const params = new URLSearchParams({ start: msText(startMs), end: msText(startMs),
    global: tsuid ? "false" : "true" });
  if (tsuid) params.set("tsuid", tsuid);
  const { body } = await request(`/api/annotation/list?${params}`);
  return body.annotations.some((note) => (note.tsuid || "") === tsuid && toMs(note.startTime) === startMs);
}

/** PUT /api/annotation: create or replace the note at (tsuid, startTime). */
export async function putNote(note) {
  return request("/api/annotation", { method: "PUT", body: JSON.stringify(note) });
}

/** DELETE /api/annotation with a JSON body (exact times, seconds or milliseconds). */
export async function deleteNote(tsuid, startTime) {
  const body = JSON.stringify(tsuid ? { tsuid, startTime } : { startTime });
  return request("/api/annotation", { method: "DELETE", body });
}

/** GET /api/query: every series of metric{tags} (aggregator none) with its TSUID. */
export async function querySeries({ startMs, endMs, metric, tags, downsample }) {
  const spec = `none:${downsample ? `${downsample}:` : ""}${metric}${tags ? `{${tags}}` : ""}`;
  const params = new URLSearchParams({ start: msText(startMs), end: msText(endMs), m: spec });
  const { body } = await request(`/api/query?${params}&show_tsuids&ms&no_annotations`);
  return body || [];
}

/** GET /api/suggest (OpenTSDB's contract): names of one kind starting with q. */
export async function suggest(type, q, max = 25) {
  const params = new URLSearchParams({ type, q, max: String(max) });
  try {
    return (await request(`/api/suggest?${params}`)).body || [];
  } catch {
    return []; // suggestions are a convenience: never block the page on them
  }
}
