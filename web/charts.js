// Charts as inline SVG, drawn from the API's numbers: horizontal (stacked) bars, a timeline of
// events and a two-series bar pair. Colours come from CSS classes (bar-<state>), so the
// Content-Security-Policy needs no inline style.
import { s } from "./dom.js";

const ROW = 22;

// rows: [{label, parts: [{key, value}]}]; one bar per row, its parts side by side, scaled to the
// largest row total. Each part carries data-key and data-value for whoever reads the chart.
export function stackedBars(rows, { width = 560, labelWidth = 160, unit = "" } = {}) {
  const max = Math.max(1, ...rows.map((r) => r.parts.reduce((a, p) => a + p.value, 0)));
  const plot = width - labelWidth - 60;
  const svg = s("svg", { width, height: rows.length * ROW + 4, role: "img", class: "chart" });
  rows.forEach((r, i) => {
    const y = i * ROW + 2;
    svg.append(s("text", { x: 0, y: y + 15 }, r.label));
    let x = labelWidth;
    let total = 0;
    for (const p of r.parts) {
      const w = (p.value / max) * plot;
      if (w > 0) {
        svg.append(s("rect", { x, y: y + 3, width: w, height: ROW - 6, class: "bar-" + p.key,
          "data-key": p.key, "data-value": p.value },
        s("title", {}, `${r.label} ${p.key}: ${p.value}${unit}`)));
      }
      x += w;
      total += p.value;
    }
    svg.append(s("text", { x: x + 4, y: y + 15 }, `${+total.toFixed(2)}${unit}`));
  });
  return svg;
}

// events: [{time, label, kind}] on one line from the first to `now`.
export function timeline(events, now, { width = 900 } = {}) {
  const svg = s("svg", { width, height: 40, role: "img", class: "chart timeline" });
  if (!events.length) return svg;
  const t0 = events[0].time;
  const span = Math.max(1, now - t0);
  const x = (t) => 10 + ((t - t0) / span) * (width - 20);
  svg.append(s("line", { x1: 10, x2: width - 10, y1: 20, y2: 20, class: "axis",
    stroke: "#a0aec0" }));
  for (const e of events) {
    const cls = e.kind === "running" ? "bar-allocated" : e.kind === "preempted" ||
      e.kind === "requeued" || e.kind === "failed" ? "bar-down" : "bar-plain";
    svg.append(s("circle", { cx: x(e.time), cy: 20, r: 6, class: cls },
      s("title", {}, e.label)));
  }
  return svg;
}

// A row of small bars (one value each, 0..max) for a telemetry number over GPUs or runs.
export function sparkBars(values, { width = 200, height = 30, max = 100 } = {}) {
  const svg = s("svg", { width, height, role: "img", class: "chart spark" });
  const w = width / Math.max(1, values.length);
  values.forEach((v, i) => {
    const hgt = Math.max(1, (Math.min(v, max) / max) * (height - 2));
    svg.append(s("rect", { x: i * w + 1, y: height - hgt, width: Math.max(1, w - 2), height: hgt,
      class: "bar-plain" }, s("title", {}, String(v))));
  });
  return svg;
}

// A sparkline: a value over time (points [{t, v}], oldest first) as a polyline from 0 to max,
// each point a dot carrying its value (data-value) and a tooltip.
export function sparkline(points, { width = 240, height = 36, max = 100, unit = "" } = {}) {
  const svg = s("svg", { width, height, role: "img", class: "chart sparkline" });
  if (!points.length) return svg;
  const t0 = points[0].t;
  const span = Math.max(1, points[points.length - 1].t - t0);
  const x = (t) => (points.length === 1 ? width / 2 : 3 + ((t - t0) / span) * (width - 6));
  const top = max > 0 ? max : 1;
  const y = (v) => height - 3 - (Math.min(Math.max(v, 0), top) / top) * (height - 6);
  svg.append(s("polyline", { class: "spark-line", fill: "none",
    points: points.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(" ") }));
  for (const p of points) {
    svg.append(s("circle", { cx: x(p.t).toFixed(1), cy: y(p.v).toFixed(1), r: 1.5,
      class: "spark-dot", "data-value": p.v }, s("title", {}, `${p.v}${unit}`)));
  }
  return svg;
}

// A filled fraction 0..1 (drain progress, delivered share).
export function progress(fraction, { width = 120 } = {}) {
  const f = Math.max(0, Math.min(1, fraction || 0));
  return s("svg", { width, height: 10, role: "img", class: "chart progress" },
    s("rect", { x: 0, y: 1, width, height: 8, rx: 4, class: "bar-idle" }),
    s("rect", { x: 0, y: 1, width: f * width, height: 8, rx: 4, class: "bar-allocated" }));
}

// Per day, a vertical bar of allocated and unallocated GPU-hours, with a dashed line at what the
// budget's share came to a day: days [{label, allocated, unallocated}].
export function dailyBars(days, sharePerDay, { width = 560, height = 180 } = {}) {
  const max = Math.max(1e-9, sharePerDay || 0, ...days.map((d) => d.allocated + d.unallocated));
  const plotH = height - 30;
  const slot = (width - 50) / Math.max(1, days.length);
  const y = (v) => 5 + plotH - (v / max) * plotH;
  const svg = s("svg", { width, height, role: "img", class: "chart daily" });
  svg.append(s("line", { x1: 40, x2: width, y1: y(0), y2: y(0), class: "axis", stroke: "#a0aec0" }),
    s("text", { x: 0, y: y(max) + 10 }, (+max.toFixed(1)).toString()), s("text", { x: 0,
      y: y(0) }, "0"));
  days.forEach((d, i) => {
    const x = 45 + i * slot;
    let top = y(0);
    for (const key of ["allocated", "unallocated"]) {
      const hgt = (d[key] / max) * plotH;
      if (hgt > 0) {
        top -= hgt;
        svg.append(s("rect", { x, y: top, width: slot * 0.7, height: hgt, class: "bar-" + key,
          "data-key": key, "data-value": d[key] }, s("title", {}, `${d.label} ${key}: ` +
          `${d[key].toFixed(2)} GPU-h`)));
      }
    }
    svg.append(s("text", { x, y: height - 5 }, d.label));
  });
  if (sharePerDay > 0) {
    svg.append(s("line", { x1: 40, x2: width, y1: y(sharePerDay), y2: y(sharePerDay),
      stroke: "#c53030", "stroke-dasharray": "4 3", class: "share" },
    s("title", {}, `its share: ${sharePerDay.toFixed(2)} GPU-h a day`)));
  }
  return svg;
}
