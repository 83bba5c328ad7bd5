// Autocomplete for the metric and tag inputs through <datalist> and /api/suggest.

import { request, suggest } from "./api.js";

function debounce(fn, waitMs) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), waitMs);
  };
}

function fill(datalist, values) {
  datalist.replaceChildren(...values.map((value) => {
    const option = document.createElement("option");
    option.value = value;
    return option;
  }));
}

/** Suggest metric names for the input from its datalist. */
export function attachMetricSuggest(input, datalist) {
  let asked = null;
  const update = debounce(async () => {
    const q = input.value.trim();
    if (q === asked) return;
    asked = q;
    fill(datalist, await suggest("metrics", q));
  }, 150);
  input.addEventListener("input", update);
  input.addEventListener("focus", update);
}

const LOOKUP_LIMIT = 1000;
const seen = new Map(); // metric -> its promise: the tag maps of its series

/** The tag maps of up to LOOKUP_LIMIT series of the metric (/api/search/lookup), or null
 * when the metric does not exist (asked first, so the page logs no 404). */
function seriesTags(metric) {
  if (!seen.has(metric)) {
    seen.set(metric, (async () => {
      const [name] = await suggest("metrics", metric, 1);
      if (name !== metric) return null;
      const params = new URLSearchParams({ m: metric, limit: String(LOOKUP_LIMIT) });
      try {
        return ((await request(`/api/search/lookup?${params}`)).body.results || [])
          .map((r) => r.tags);
      } catch {
        return null;
      }
    })());
  }
  return seen.get(metric);
}

const globText = (glob) => new RegExp(`^${glob.split("*").map((part) => part
  .replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`, "i");

/** Does a tag map pass "k=v" (v: a value, a|b, a glob; a filter function passes all)? */
function passes(tags, pair) {
  const eq = pair.indexOf("=");
  const key = pair.slice(0, eq).trim();
  const value = pair.slice(eq + 1).trim();
  if (/^\w+\(/.test(value)) return true;
  if (!(key in tags)) return false;
  if (value.includes("*")) return globText(value).test(tags[key]);
  return value.split("|").includes(tags[key]);
}

/** Tag keys (entry has no "=") or values of one key, of the metric's series that pass the
 * pairs already typed; /api/suggest (every name of the store) when there is no metric. */
export async function tagNames(metric, done, entry) {
  const eq = entry.indexOf("=");
  const key = eq < 0 ? "" : entry.slice(0, eq).trim();
  const prefix = eq < 0 ? entry : entry.slice(eq + 1);
  const tagMaps = metric ? await seriesTags(metric) : null;
  if (!tagMaps) return suggest(eq < 0 ? "tagk" : "tagv", prefix);
  const names = new Set();
  for (const tags of tagMaps.filter((t) => done.every((pair) => passes(t, pair)))) {
    if (eq < 0) Object.keys(tags).forEach((k) => names.add(k));
    else if (key in tags) names.add(tags[key]);
  }
  return [...names].filter((name) => name.startsWith(prefix)).sort().slice(0, 25);
}

/**
 * Suggest for "tagk=value, tagk=value": the last entry completes a tag key, or after its "="
 * a value of that key. With a metric (metricInput's value), only the keys and values of its
 * series that match the pairs before. Options hold the whole text so the browser's datalist
 * matching keeps working.
 */
export function attachTagSuggest(input, datalist, metricInput = null) {
  let asked = null;
  const update = debounce(async () => {
    const text = input.value;
    const cut = text.lastIndexOf(",") + 1;
    const head = text.slice(0, cut) + (cut ? " " : "");
    const entry = text.slice(cut).trimStart();
    const metric = metricInput ? metricInput.value.trim() : "";
    const done = text.slice(0, Math.max(0, cut - 1)).split(",").map((t) => t.trim())
      .filter((t) => t.indexOf("=") > 0);
    const eq = entry.indexOf("=");
    const key = JSON.stringify([metric, done, eq < 0 ? `k:${entry}` : `v:${entry}`]);
    if (key === asked) return;
    asked = key;
    const names = await tagNames(metric, done, entry);
    fill(datalist, names.map((name) => (eq < 0 ? `${head}${name}=`
      : `${head}${entry.slice(0, eq + 1)}${name}`)));
  }, 150);
  input.addEventListener("input", update);
  input.addEventListener("focus", update);
}
