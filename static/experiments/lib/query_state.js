// The compare page's URL holds the selection and every option, so a shared link shows the same view. Two scripts
// write it: compare.js (the charts' options) and compare_statistics.js (the statistics' options); each rewrites
// only the keys it owns and keeps the others.

// `search` with the `owned` keys replaced by `params`; "runs" first; commas left readable.
export function mergeQuery(search, owned, params) {
  const merged = new URLSearchParams(search);
  for (const key of owned) merged.delete(key);
  for (const [key, value] of params) merged.append(key, value);
  const ordered = new URLSearchParams();
  if (merged.has("runs")) ordered.set("runs", merged.get("runs"));
  for (const [key, value] of merged) if (key !== "runs") ordered.append(key, value);
  return `?${ordered.toString().replaceAll("%2C", ",")}`;
}

// The statistics' options, named as GET /api/statistics names them, and their defaults (compare_stats.py).
export const STATISTICS_KEYS = ["by", "metric", "count", "last", "improve", "over"];
export const STATISTICS_DEFAULTS = {by: "algorithm", metric: "eval/return_mean", count: "final", last: "5"};

// The options that differ from the defaults, for the URL: the chosen pair of P(X > Y) included; N only when the
// mean of the last N counts.
export function statisticsParams(values) {
  const params = new URLSearchParams();
  for (const key of STATISTICS_KEYS) {
    const value = String(values[key] ?? "").trim();
    if (value === "" || value === STATISTICS_DEFAULTS[key]) continue;
    if (key === "last" && values.count !== "last") continue;
    params.set(key, value);
  }
  return params;
}

// The options a URL asks for, each only where the page offers it (`offered`: {key: [values]} for the lists);
// the groups of P(X > Y) are known only once computed, so they are taken as they are (the server checks them).
export function readStatistics(search, offered) {
  const query = new URLSearchParams(search);
  const values = {};
  for (const key of STATISTICS_KEYS) {
    const value = query.get(key);
    if (value === null) continue;
    if (key === "last") {
      if (/^\d{1,4}$/.test(value) && Number(value) >= 1 && Number(value) <= 1000) values.last = String(Number(value));
    } else if (key === "improve" || key === "over") {
      if (value !== "" && value.length <= 200) values[key] = value;
    } else if ((offered[key] || []).includes(value)) {
      values[key] = value;
    }
  }
  return values;
}
