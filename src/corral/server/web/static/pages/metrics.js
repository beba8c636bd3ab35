// Helpers over the metrics API's series: several metrics of one selector into their charts.
import { get, has } from "../api.js";

// What each series is, in words, for legends and tooltips (never the API's metric name).
export const SERIES_NAMES = {
  net_rx_bps: "received", net_tx_bps: "sent", host_net_rx_bytes_s: "received", host_net_tx_bytes_s: "sent",
  cpu_pct: "CPU busy", mem_used_pct: "memory used", disk_used_pct: "disk used", gpu_util_pct: "utilisation",
  gpu_mem_used_mib: "memory used", gpu_power_w: "power draw", gpu_temp_c: "temperature",
};

// Fetch several metrics for one selector into their charts; series are named by `nameBy` label or by what the
// metric is (SERIES_NAMES). `scale` (e.g. 1 / 1024 for MiB shown in GiB) multiplies every value.
export async function fillCharts(charts, selector, range) {
  if (!has("/api/v1/metrics/series")) {
    for (const c of Object.values(charts)) c.chart.setData([], "metrics are not available on this server");
    return;
  }
  const r = range.current();
  await Promise.all(Object.entries(charts).map(async ([key, c]) => {
    const metrics = c.metrics || [key];
    const results = await Promise.all(metrics.map((m) => get("/api/v1/metrics/series", { metric: m, ...selector, ...r })));
    const scale = c.scale ?? 1;
    const series = results.flatMap((res, i) => res.series.map((s) => ({
      name: c.nameBy ? `${c.nameBy} ${s.labels[c.nameBy] ?? ""}` : SERIES_NAMES[metrics[i]] || c.name || metrics[i],
      points: scale === 1 ? s.points : s.points.map(([t, v]) => [t, v * scale]),
    })));
    c.chart.setData(series, undefined, [null, range.span()[1]]); // the axis ends at the range's end: a stop shows
  }));
}
