// Helpers over the metrics API's series: averages across series, lookups by label.
import { get, has } from "../api.js";

export function averageSeries(series) {
  const sums = new Map();
  for (const s of series || []) for (const [t, v] of s.points) {
    const e = sums.get(t) || [0, 0]; e[0] += v; e[1] += 1; sums.set(t, e);
  }
  return [...sums].sort((a, b) => a[0] - b[0]).map(([t, [s, n]]) => [t, s / n]);
}

// Fetch several metrics for one selector into their charts; series are named by `nameBy` label or metric.
export async function fillCharts(charts, selector, range) {
  if (!has("/api/v1/metrics/series")) {
    for (const c of Object.values(charts)) c.chart.setData([], "metrics are not available on this server");
    return;
  }
  const r = range.current();
  await Promise.all(Object.entries(charts).map(async ([key, c]) => {
    const metrics = c.metrics || [key];
    const results = await Promise.all(metrics.map((m) => get("/api/v1/metrics/series", { metric: m, ...selector, ...r })));
    const series = results.flatMap((res, i) => res.series.map((s) => ({
      name: c.nameBy ? `${c.nameBy} ${s.labels[c.nameBy] ?? ""}` : metrics.length > 1 ? metrics[i] : res.metric,
      points: s.points,
    })));
    c.chart.setData(series);
  }));
}
