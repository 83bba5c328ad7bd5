// Sub-queries <-> OpenTSDB's m= text ("sum:1m-avg-zero:rate:sys.cpu.user{host=*}"), and the
// /api/query URL and curl command for them.

/** {aggregator, interval, fn, fill, rate, metric, tags} as an m= value. */
export function mText(q) {
  const parts = [q.aggregator || "sum"];
  if (q.interval) parts.push([q.interval, q.fn || "avg", ...(q.fill && q.fill !== "none" ? [q.fill] : [])].join("-"));
  if (q.rate) parts.push("rate");
  const tags = String(q.tags || "").split(",").map((t) => t.trim()).filter(Boolean).join(",");
  parts.push(tags ? `${q.metric}{${tags}}` : q.metric);
  return parts.join(":");
}

/** Split on ":" outside braces (filters may hold colons, e.g. regexp(a:b)). */
function splitTop(text) {
  const out = [];
  let depth = 0;
  let current = "";
  for (const ch of text) {
    if (ch === "{" || ch === "(") depth += 1;
    if (ch === "}" || ch === ")") depth -= 1;
    if (ch === ":" && depth === 0) {
      out.push(current);
      current = "";
    } else {
      current += ch;
    }
  }
  out.push(current);
  return out;
}

/** An m= value back into a sub-query (what the page can show of it). */
export function parseM(text) {
  const parts = splitTop(String(text || ""));
  const q = { aggregator: parts[0] || "sum", interval: "", fn: "avg", fill: "none", rate: false,
    metric: "", tags: "" };
  const last = parts.length > 1 ? parts.at(-1) : "";
  const brace = last.indexOf("{");
  q.metric = brace < 0 ? last : last.slice(0, brace);
  q.tags = brace < 0 ? "" : last.slice(brace + 1, last.lastIndexOf("}"));
  for (const part of parts.slice(1, -1)) {
    if (part.startsWith("rate")) {
      q.rate = true;
    } else if (/^\w+-\w+/.test(part)) {
      const [interval, fn, fill] = part.split("-");
      Object.assign(q, { interval, fn, fill: fill || "none" });
    }
  }
  return q;
}

// Keep the characters of OpenTSDB's syntax readable in the URL a person copies.
const READABLE = { "%7B": "{", "%7D": "}", "%3D": "=", "%2C": ",", "%3A": ":", "%2A": "*",
  "%7C": "|" };
const encode = (value) => encodeURIComponent(value).replace(/'/g, "%27")
  .replace(/%(7B|7D|3D|2C|3A|2A|7C)/g, (code) => READABLE[code]);

/** The /api/query path: start/end as given ("24h-ago" or ms), one m= per sub-query. */
export function queryPath({ start, end, queries }) {
  const params = [`start=${encode(start)}`];
  if (end) params.push(`end=${encode(end)}`);
  for (const q of queries) params.push(`m=${encode(mText(q))}`);
  params.push("global_annotations");
  return `/api/query?${params.join("&")}`;
}

/** A curl command for the path on this server (-g: braces are not curl's URL globs). */
export const curlCommand = (origin, path) => `curl -sg '${origin}${path}'`;
