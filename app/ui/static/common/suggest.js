// Autocomplete for the metric and tag inputs through <datalist> and /api/suggest.

import { suggest } from "./api.js";

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

/**
 * Suggest for "tagk=value, tagk=value": the last entry completes a tag key, or after its "="
 * a tag value. Options hold the whole text so the browser's datalist matching keeps working.
 */
export function attachTagSuggest(input, datalist) {
  let asked = null;
  const update = debounce(async () => {
    const text = input.value;
    const cut = text.lastIndexOf(",") + 1;
    const head = text.slice(0, cut) + (cut ? " " : "");
    const entry = text.slice(cut).trimStart();
    const eq = entry.indexOf("=");
    const key = eq < 0 ? `k:${entry}` : `v:${entry.slice(eq + 1)}`;
    if (key + head === asked) return;
    asked = key + head;
    if (eq < 0) {
      const names = await suggest("tagk", entry);
      fill(datalist, names.map((name) => `${head}${name}=`));
    } else {
      const names = await suggest("tagv", entry.slice(eq + 1));
      fill(datalist, names.map((name) => `${head}${entry.slice(0, eq + 1)}${name}`));
    }
  }, 150);
  input.addEventListener("input", update);
  input.addEventListener("focus", update);
}
