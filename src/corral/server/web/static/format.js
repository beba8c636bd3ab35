// One way to write times, values with units and GPU faults on every page that imports it.

const pad = (n) => String(n).padStart(2, "0");

// The browser's zone as an abbreviation ("UTC", "CET", "GMT+2"), once.
const ZONE = (() => {
  try {
    const part = new Intl.DateTimeFormat("en-GB", { timeZoneName: "short" }).formatToParts(new Date())
      .find((p) => p.type === "timeZoneName");
    return part ? part.value : "";
  } catch (_) { return ""; }
})();

const toDate = (t) => (t instanceof Date ? t : typeof t === "number" ? new Date(t * 1000) : new Date(t));

// "2026-11-26 14:05:09 UTC": 24-hour, seconds, the zone; `t` is an ISO string, a Date or Unix seconds.
export function fmtDateTime(t) {
  if (t === null || t === undefined || t === "") return "";
  const d = toDate(t);
  if (Number.isNaN(d.getTime())) return String(t);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${fmtClock(d)}${ZONE ? " " + ZONE : ""}`;
}

// "14:05:09" (or "14:05" with seconds false), 24-hour, no zone: axis ticks next to a zoned label.
export function fmtClock(t, seconds = true) {
  const d = toDate(t);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}` + (seconds ? `:${pad(d.getSeconds())}` : "");
}
export const zone = () => ZONE;

// The smallest 1, 2, 2.5, 5 or 10 x 10^n at or over `v` (an axis maximum): 82.8 -> 100, 0.3 -> 0.5.
export function niceMax(v) {
  if (!(v > 0) || !Number.isFinite(v)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v * (1 - 1e-9)) return m * p;
  return 10 * p;
}

const trim = (x) => String(Number(x.toPrecision(3)));

// A value with its unit: "%" and "°C" and "W" as numbers, "B/s" and "B" scaled (kB/s, MB/s, GiB ...).
export function fmtValue(v, unit = "") {
  if (v === null || v === undefined || Number.isNaN(v)) return "—";
  if (unit === "B/s" || unit === "B") {
    const steps = ["", "k", "M", "G", "T"];
    let i = 0, x = Math.abs(v);
    while (x >= 1000 && i < steps.length - 1) { x /= 1000; i += 1; }
    return `${v < 0 ? "-" : ""}${trim(x)} ${steps[i]}${unit}`;
  }
  const a = Math.abs(v);
  const s = a >= 1e6 ? trim(v / 1e6) + "M" : a >= 1e4 ? trim(v / 1e3) + "k" : a >= 100 ? v.toFixed(0) : trim(v);
  if (!unit) return s;
  if (unit === "GPUs" && s === "1") return "1 GPU";
  return unit === "%" ? s + "%" : `${s} ${unit}`;
}

const FAULTS = {
  xid: "an Xid error", ecc_dbe: "double-bit ECC error", off_bus: "fallen off the bus", nvml_error: "NVML cannot read it",
  temperature: "over its temperature limit", gpu_missing: "missing", admin_disable: "disabled by an admin",
  recovered: "recovered", admin_enable: "enabled by an admin",
};

// A GPU health reason in words: ("xid", "xid: fatal Xid 79: ...") -> "Xid 79"; ("off_bus") -> "fallen off the bus".
export function faultText(reason, detail = "") {
  const r = String(reason || "").toLowerCase();
  const xid = String(detail || "").match(/Xid (\d+)/i);
  if (r === "xid" || (!r && xid)) return xid ? `Xid ${xid[1]}` : FAULTS.xid;
  return FAULTS[r] || String(reason || "");
}

// A node or GPU event kind in words.
const KINDS = {
  gpu_unhealthy: "GPU taken out", gpu_healthy: "GPU back in the pool", gpu_count: "GPU count changed",
  gpu_failed: "GPU failed", requeued: "requeued", preempted: "preempted",
};
export const kindText = (k) => KINDS[k] || String(k || "").replace(/_/g, " ");

// An event message with its leading reason code in words: "xid: fatal Xid 79: simulated" -> "Xid 79 (fatal Xid 79: simulated)".
export function eventText(message) {
  const m = String(message || "").match(/^([a-z_]+): (.*)$/s);
  if (!m || !(m[1] in FAULTS)) return String(message || "");
  const words = faultText(m[1], m[2]);
  const fatal = /^fatal Xid \d+/.test(m[2]) ? "fatal " : "";
  const rest = m[2].replace(/^fatal Xid \d+:?\s*/, "");
  return rest && rest !== words ? `${fatal}${words} — ${rest}` : fatal + words;
}
