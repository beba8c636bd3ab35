// Helpers over the metrics API's series: several metrics of one selector into their charts.
import { get, has } from "../api.js";

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
