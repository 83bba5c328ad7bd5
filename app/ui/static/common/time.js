// Times on the pages: one text format, "YYYY-MM-DD HH:MM:SS", in one explicit zone that the
// user chooses: UTC or the browser's own. Inputs and displays go through this module only.

const pad = (n, width = 2) => String(n).padStart(width, "0");
const BROWSER_ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
let zone = "local"; // "utc" or "local"

export const ZONES = ["local", "utc"];
export const getZone = () => zone;
export function setZone(value) {
  zone = value === "utc" ? "utc" : "local";
}

/** The zone offset in ms at a time (0 in UTC). */
export const offsetMs = (ms) => (zone === "utc" ? 0 : -new Date(ms).getTimezoneOffset() * 60000);

function offsetText(ms) {
  const minutes = Math.round(offsetMs(ms) / 60000);
  const sign = minutes < 0 ? "−" : "+";
  return `UTC${sign}${pad(Math.floor(Math.abs(minutes) / 60))}:${pad(Math.abs(minutes) % 60)}`;
}

/** What the page says about its times, e.g. "UTC" or "Europe/Paris (your browser, UTC+01:00)". */
export function zoneLabel(ms = Date.now()) {
  return zone === "utc" ? "UTC" : `${BROWSER_ZONE} (your browser, ${offsetText(ms)})`;
}

/** The option text for each zone choice (short: the full zone name is written under the
 * inputs, and a long one would be cut in a narrow select). */
export const zoneOptionText = (value) => (value === "utc" ? "UTC" : "Your browser's");

/** Calendar fields of a time in the chosen zone. */
export function fields(ms) {
  const d = new Date(ms + offsetMs(ms));
  return { year: d.getUTCFullYear(), month: d.getUTCMonth() + 1, day: d.getUTCDate(),
    hour: d.getUTCHours(), minute: d.getUTCMinutes(), second: d.getUTCSeconds(),
    millis: d.getUTCMilliseconds() };
}

/** Milliseconds as "YYYY-MM-DD HH:MM:SS" in the chosen zone (".mmm" when there are some). */
export function formatTime(ms) {
  const f = fields(ms);
  const text = `${f.year}-${pad(f.month)}-${pad(f.day)} `
    + `${pad(f.hour)}:${pad(f.minute)}:${pad(f.second)}`;
  return f.millis ? `${text}.${pad(f.millis, 3)}` : text;
}

const TIME_TEXT = /^(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?)?$/;

/** "YYYY-MM-DD[ HH:MM[:SS[.mmm]]]" in the chosen zone to milliseconds, or NaN. */
export function parseTime(text) {
  const match = TIME_TEXT.exec(String(text || "").trim());
  if (!match) return NaN;
  const [year, month, day, hour, minute, second] = match.slice(1, 7).map((v) => Number(v || 0));
  const millis = match[7] ? Number(match[7].padEnd(3, "0")) : 0;
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 59) {
    return NaN;
  }
  const wall = Date.UTC(year, month - 1, day, hour, minute, second, millis);
  if (new Date(wall).getUTCDate() !== day) return NaN; // 2024-02-31 and the like
  if (zone === "utc") return wall;
  // The offset at the wall time itself, then once more in case a DST change lies between.
  const first = wall - offsetMs(wall);
  return wall - offsetMs(first);
}

/**
 * The error message for a time field ("" when its text is a time): empty, or not in the one
 * format. A day-first or month-first date (27/11/2026 10:00) gets the text to type instead.
 */
export function timeProblem(label, text) {
  const value = String(text || "").trim();
  if (!value) return `${label}: enter a time as YYYY-MM-DD HH:MM:SS.`;
  if (Number.isFinite(parseTime(value))) return "";
  const slash = /^(\d{1,2})[/.-](\d{1,2})[/.-](\d{4})(.*)$/.exec(value);
  let hint = "";
  if (slash) {
    const [, a, b, year, rest] = slash;
    const [month, day] = Number(a) > 12 ? [b, a] : Number(b) > 12 ? [a, b] : [null, null];
    const guess = month && `${year}-${pad(Number(month))}-${pad(Number(day))}${rest}`;
    if (guess && Number.isFinite(parseTime(guess))) hint = `, e.g. ${guess.trim()}`;
  }
  return `${label}: “${value}” is not a time as YYYY-MM-DD HH:MM:SS${hint}.`;
}
