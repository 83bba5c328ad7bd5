// Times in the page: local wall-clock text <-> JavaScript milliseconds.

const pad = (n, width = 2) => String(n).padStart(width, "0");

/** Milliseconds to a datetime-local value (local time, to the second). */
export function toLocalInput(ms) {
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T`
    + `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** Milliseconds as "YYYY-MM-DD HH:MM:SS" in local time (".mmm" when there are some). */
export function formatTime(ms) {
  const text = toLocalInput(ms).replace("T", " ");
  return ms % 1000 ? `${text}.${pad(ms % 1000, 3)}` : text;
}

/** A datetime-local value (local time) to milliseconds, or NaN. */
export function fromLocalInput(value) {
  return value ? new Date(value).getTime() : NaN;
}
