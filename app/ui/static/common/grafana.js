// Links into Grafana's Explore with the same range and series, when tsd.ui.grafana_url is set
// (it reaches the page as <body data-grafana-url>). The query model is Grafana's OpenTSDB
// datasource's; Explore opens on the default datasource.

/** Grafana's base URL from the page, or "" when none is configured. */
export const grafanaBase = () => document.body.dataset.grafanaUrl || "";

/** "host=web01, dc=lga|sjc, rack=*" as Grafana OpenTSDB filters (grouping by each tag). */
export function grafanaFilters(tags) {
  return String(tags || "").split(",").map((pair) => pair.trim()).filter(Boolean)
    .map((pair) => {
      const eq = pair.indexOf("=");
      const tagk = pair.slice(0, eq).trim();
      let filter = pair.slice(eq + 1).trim();
      let type = filter.includes("*") ? "wildcard" : "literal_or";
      const call = /^(\w+)\((.*)\)$/.exec(filter);
      if (call) [, type, filter] = call;
      return { type, tagk, filter, groupBy: true };
    });
}

/**
 * The Explore URL for sub-queries ({metric, tags, aggregator, downsample: "1m-avg-zero",
 * rate}) over {startMs, endMs}; "" when Grafana is not configured or there is no metric.
 */
export function exploreUrl(queries, range) {
  const base = grafanaBase();
  const chosen = queries.filter((q) => q.metric);
  if (!base || !chosen.length) return "";
  const targets = chosen.map((q, i) => {
    const [interval, fn, fill] = (q.downsample || "").split("-");
    return { refId: String.fromCharCode(65 + (i % 26)), metric: q.metric,
      aggregator: q.aggregator || "sum", filters: grafanaFilters(q.tags),
      disableDownsampling: !interval, downsampleInterval: interval || "",
      downsampleAggregator: fn || "avg", downsampleFillPolicy: fill || "none",
      shouldComputeRate: Boolean(q.rate), isCounter: Boolean(q.counter) };
  });
  const left = { queries: targets,
    range: { from: String(range.startMs), to: String(range.endMs) } };
  return `${base}/explore?orgId=1&left=${encodeURIComponent(JSON.stringify(left))}`;
}
