// The public HTTP API, and nothing else: every call the annotation page makes is here.

export class ApiError extends Error {
  constructor(status, message, details) {
    super(details ? `${message}: ${details}` : message);
    this.status = status;
  }
}

async function request(url, options = {}) {
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

/** GET /api/annotation/list: global notes and those of the chosen series in a range. */
export async function listNotes({ startMs, endMs, metric, tags, q }) {
  const params = new URLSearchParams({ start: msText(startMs), end: msText(endMs) });
  if (metric) params.append("m", tags ? `${metric}{${tags}}` : metric);
  if (q) params.set("q", q);
  const { body } = await request(`/api/annotation/list?${params}`);
  return body;
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
