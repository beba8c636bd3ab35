// Time-series charts drawn as SVG by hand: hover values, drag to zoom, double-click to reset, range picker.
// Axes carry their unit and top at a round value (1, 2, 2.5, 5, 10 x 10^n; percent at 100); times are 24-hour.
import { fmtClock, fmtDateTime, fmtValue, niceMax, zone } from "./format.js";
import { esc } from "./ui.js";

const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#2b59c3", "#d9480f", "#2f9e44", "#9c36b5", "#e8590c", "#1098ad", "#c2255c", "#5c940d"];
const PAD = { l: 58, r: 10, t: 8, b: 20 };

function fmtVal(v, unit) {
  if (v === null || v === undefined) return "—";
  const a = Math.abs(v);
  const s = a >= 1e9 ? (v / 1e9).toFixed(1) + "G" : a >= 1e6 ? (v / 1e6).toFixed(1) + "M" : a >= 1e4 ? (v / 1e3).toFixed(1) + "k"
    : a >= 100 ? v.toFixed(0) : a >= 0.1 || a === 0 ? v.toFixed(1) : String(Number(v.toPrecision(2)));
  return s + (unit ? " " + unit : "");
}
const fmtTick = (t, span) => {
  const d = new Date(t * 1000);
  return span > 2 * 86400 ? `${d.getMonth() + 1}/${d.getDate()} ${fmtClock(d, false)}` : fmtClock(d, span <= 600);
};

function nearest(points, t) {
  let lo = 0, hi = points.length - 1;
  if (hi < 0) return null;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (points[mid][0] < t) lo = mid + 1; else hi = mid; }
  if (lo > 0 && Math.abs(points[lo - 1][0] - t) < Math.abs(points[lo][0] - t)) lo -= 1;
  return points[lo];
}

export class TimeChart {
  // `unit`: "%", "W", "°C", "GiB", "B/s", "GPUs" ... on the axis and in the tooltip; `yMax`: a fixed top (100 for %).
  constructor(parent, { title, unit = "", yMax = null, onZoom = null, onReset = null, id = "" }) {
    this.unit = unit; this.yMax = yMax ?? (unit === "%" ? 100 : null); this.onZoom = onZoom; this.onReset = onReset;
    this.series = []; this.domain = null;
    this.el = document.createElement("div");
    this.el.className = "chart";
    if (id) this.el.dataset.chart = id;
    this.el.innerHTML = `<h3>${esc(title)}</h3><svg></svg><div class="tip"></div><div class="legend muted"></div>`;
    parent.appendChild(this.el);
    this.svg = this.el.querySelector("svg"); this.tip = this.el.querySelector(".tip");
    this.svg.addEventListener("mousemove", (e) => this.hover(e));
    this.svg.addEventListener("mouseleave", () => { this.tip.style.display = "none"; this.drawCursor(null); });
    this.svg.addEventListener("mousedown", (e) => { this.dragFrom = this.localX(e); });
    this.svg.addEventListener("mouseup", (e) => this.endDrag(e));
    this.svg.addEventListener("dblclick", () => this.onReset && this.onReset());
  }

  // `domain` [t0, t1] (Unix seconds; either may be null: from the data) pins the time axis, e.g. to a job's life
  // or to end now, so that readings that stopped show as a gap; points outside it are left out.
  setData(series, empty = "no data in this range", domain = null) {
    this.domain = domain;
    const inside = (p) => !domain || ((domain[0] ?? -Infinity) <= p[0] && p[0] <= (domain[1] ?? Infinity));
    this.series = series.map((s) => ({ ...s, points: s.points.filter(inside) })).filter((s) => s.points.length);
    this.emptyText = empty;
    this.render();
  }

  localX(e) { const r = this.svg.getBoundingClientRect(); return e.clientX - r.left; }

  render() {
    const W = this.svg.clientWidth || 420, H = this.svg.clientHeight || 180;
    this.W = W; this.H = H;
    this.svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    const all = this.series.flatMap((s) => s.points);
    this.svg.dataset.points = String(all.length);
    if (!all.length) {
      this.svg.innerHTML = `<text x="${W / 2}" y="${H / 2}" text-anchor="middle" fill="#667085" font-size="12">${esc(this.emptyText)}</text>`;
      this.el.querySelector(".legend").textContent = "";
      return;
    }
    const t0 = this.domain?.[0] ?? Math.min(...all.map((p) => p[0]));
    const t1 = this.domain?.[1] ?? Math.max(...all.map((p) => p[0]));
    const vmax = this.yMax ?? niceMax(Math.max(...all.map((p) => p[1])));
    this.t0 = t0; this.t1 = t1 <= t0 ? t0 + 1 : t1; this.vmax = vmax;
    this.svg.dataset.t0 = String(this.t0); this.svg.dataset.t1 = String(this.t1); this.svg.dataset.ymax = String(vmax);
    const x = (t) => PAD.l + ((t - this.t0) / (this.t1 - this.t0)) * (W - PAD.l - PAD.r);
    const y = (v) => H - PAD.b - (v / vmax) * (H - PAD.t - PAD.b);
    this.x = x; this.y = y;
    let out = "";
    for (const f of [0, 0.5, 1]) {
      const v = vmax * f, yy = y(v);
      out += `<line x1="${PAD.l}" x2="${W - PAD.r}" y1="${yy}" y2="${yy}" stroke="#e3e6ec"/>`;
      out += `<text class="y-tick" x="${PAD.l - 4}" y="${yy + 4}" text-anchor="end" font-size="10" fill="#667085">${esc(fmtValue(v, this.unit))}</text>`;
    }
    const span = this.t1 - this.t0;
    for (const f of [0, 1 / 3, 2 / 3, 1]) {
      const t = this.t0 + span * f;
      out += `<text x="${x(t)}" y="${H - 5}" text-anchor="${f === 0 ? "start" : f === 1 ? "end" : "middle"}" font-size="10" fill="#667085">${fmtTick(t, span)}</text>`;
    }
    this.series.forEach((s, i) => {
      const pts = s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
      out += s.points.length > 1 ? `<polyline fill="none" stroke="${COLORS[i % COLORS.length]}" stroke-width="1.6" points="${pts}"/>`
        : `<circle cx="${pts.split(",")[0]}" cy="${pts.split(",")[1]}" r="2.5" fill="${COLORS[i % COLORS.length]}"/>`;
    });
    out += `<line class="cursor" y1="${PAD.t}" y2="${H - PAD.b}" stroke="#172033" stroke-dasharray="3,3" visibility="hidden"/>`;
    out += `<rect class="sel" y="${PAD.t}" height="${H - PAD.t - PAD.b}" fill="rgba(43,89,195,.15)" visibility="hidden"/>`;
    this.svg.innerHTML = out;
    const legend = this.series.slice(0, 8).map((s, i) =>
      `<span style="color:${COLORS[i % COLORS.length]}">■</span> ${esc(s.name)}`).join(" &nbsp; ");
    this.el.querySelector(".legend").innerHTML = legend + (this.series.length > 8 ? ` … ${this.series.length - 8} more` : "")
      + ` &nbsp; <span class="zone">times in ${esc(zone())}</span>`;
  }

  timeAt(px) { return this.t0 + ((px - PAD.l) / (this.W - PAD.l - PAD.r)) * (this.t1 - this.t0); }

  drawCursor(px) {
    const c = this.svg.querySelector(".cursor");
    if (!c) return;
    if (px === null) { c.setAttribute("visibility", "hidden"); return; }
    c.setAttribute("x1", px); c.setAttribute("x2", px); c.setAttribute("visibility", "visible");
  }

  hover(e) {
    if (!this.series.length || this.t0 === undefined) return;
    const px = this.localX(e);
    const t = this.timeAt(px);
    if (this.dragFrom !== undefined && this.dragFrom !== null) {
      const sel = this.svg.querySelector(".sel");
      sel.setAttribute("x", Math.min(px, this.dragFrom)); sel.setAttribute("width", Math.abs(px - this.dragFrom));
      sel.setAttribute("visibility", "visible");
    }
    this.drawCursor(px);
    const rows = this.series.slice(0, 8).map((s, i) => {
      const p = nearest(s.points, t);
      return `<span style="color:${COLORS[i % COLORS.length]}">■</span> ${esc(s.name)}: <b>${esc(fmtValue(p && p[1], this.unit))}</b>`;
    });
    this.tip.innerHTML = `${esc(fmtDateTime(t))}<br>${rows.join("<br>")}`;
    this.tip.style.display = "block";
    // Right of the cursor on the left half, left of it on the right half: the tip never leaves the chart.
    const w = this.tip.offsetWidth || 160;
    this.tip.style.left = (px > this.W / 2 ? Math.max(0, px - w - 12) : Math.min(px + 12, this.W - w)) + "px";
    this.tip.style.top = "28px";
  }

  endDrag(e) {
    const from = this.dragFrom; this.dragFrom = null;
    const sel = this.svg.querySelector(".sel"); if (sel) sel.setAttribute("visibility", "hidden");
    if (from === null || from === undefined || this.t0 === undefined) return;
    const to = this.localX(e);
    if (Math.abs(to - from) < 6 || !this.onZoom) return;
    const a = this.timeAt(Math.min(from, to)), b = this.timeAt(Math.max(from, to));
    this.onZoom(a, b);
  }
}

// The time range of a page: a rolling window (15m .. 7d, ending now) or a fixed one picked by zooming.
// `whole` (optional): () => [t0, t1], a span of its own (a job's run) offered first and picked by default.
export class RangePicker {
  constructor(parent, onChange, defaultS = 3600, { whole = null, wholeLabel = "whole run" } = {}) {
    this.whole = whole; this.windowS = whole ? 0 : defaultS; this.fixed = null; this.onChange = onChange;
    this.el = document.createElement("div");
    this.el.className = "range";
    const opts = [...(whole ? [[wholeLabel, 0]] : []), ["15m", 900], ["1h", 3600], ["6h", 21600], ["24h", 86400], ["7d", 604800]];
    this.el.innerHTML = `<span class="muted">Range:</span>` + opts.map(([l, s]) =>
      `<button type="button" class="secondary" data-s="${s}">${esc(l)}</button>`).join("") +
      `<button type="button" class="secondary" data-reset hidden>Reset zoom</button><span class="muted" data-label></span>`;
    parent.appendChild(this.el);
    this.el.addEventListener("click", (e) => {
      const b = e.target.closest("button"); if (!b) return;
      if (b.dataset.s !== undefined) this.windowS = Number(b.dataset.s);
      this.fixed = null; this.paint(); this.onChange();
    });
    this.paint();
  }
  zoom(a, b) { this.fixed = [a, b]; this.paint(); this.onChange(); }
  reset() { this.fixed = null; this.paint(); this.onChange(); }
  paint() {
    this.el.querySelectorAll("button[data-s]").forEach((b) => b.classList.toggle("on", !this.fixed && Number(b.dataset.s) === this.windowS));
    this.el.querySelector("[data-reset]").hidden = !this.fixed;
    this.el.querySelector("[data-label]").textContent = this.fixed
      ? `${fmtDateTime(this.fixed[0])} – ${fmtDateTime(this.fixed[1])}` : "";
  }
  // The span shown, in Unix seconds.
  span() {
    const now = Date.now() / 1000;
    if (this.fixed) return this.fixed;
    return this.whole && this.windowS === 0 ? this.whole() : [now - this.windowS, now];
  }
  current() {
    const [a, b] = this.span();
    const step = Math.max(5, Math.round((b - a) / 150));
    return { start: new Date(a * 1000).toISOString(), end: new Date(b * 1000).toISOString(), step_s: step };
  }
}

// Simple bar chart for reports: one bar per key.
export function barChart(parent, rows, { unit = "", title = "" } = {}) {
  const W = Math.max(parent.clientWidth || 600, 300), H = 220, pb = 40, pl = 50;
  const max = niceMax(Math.max(1e-9, ...rows.map((r) => r.value)));
  const bw = rows.length ? (W - pl - 10) / rows.length : 0;
  let out = `<svg viewBox="0 0 ${W} ${H}" width="100%" height="${H}" data-points="${rows.length}">`;
  rows.forEach((r, i) => {
    const h = (r.value / max) * (H - pb - 10), x = pl + i * bw;
    out += `<rect x="${x + 2}" y="${H - pb - h}" width="${Math.max(1, bw - 4)}" height="${h}" fill="${COLORS[0]}"><title>${esc(r.label)}: ${esc(fmtVal(r.value, unit))}</title></rect>`;
    if (rows.length <= 31) out += `<text x="${x + bw / 2}" y="${H - pb + 14}" font-size="10" text-anchor="middle" fill="#667085">${esc(String(r.label).slice(0, 12))}</text>`;
  });
  out += `<text x="${pl - 4}" y="14" font-size="10" text-anchor="end" fill="#667085">${esc(fmtValue(max, unit))}</text>`;
  out += `<text x="${pl - 4}" y="${H - pb}" font-size="10" text-anchor="end" fill="#667085">0</text></svg>`;
  parent.innerHTML = `<div class="chart"><h3>${esc(title)}</h3>${out}</div>`;
}
