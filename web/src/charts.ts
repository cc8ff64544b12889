// Every chart of the dashboard is a uPlot chart (https://github.com/leeoniya/uPlot, MIT): these
// helpers only turn the API's numbers into uPlot's options and data. Each chart's host element
// keeps its uPlot instance (host.uplot), so that a page being replaced destroys its charts
// (destroyCharts) and a test can read the data a chart was drawn from.
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { h } from "./dom";

export type ChartHost = HTMLDivElement & { uplot?: uPlot };

// The dashboard's colours (style.css's --allocated and so on): a canvas cannot read CSS classes.
export const COLOURS: Record<string, string> = {
  allocated: "#2b6cb0", unallocated: "#d69e2e", idle: "#a0aec0", draining: "#9f7aea",
  down: "#c53030", plain: "#4a5568", share: "#c53030", demand: "#38a169",
};
const colour = (key: string): string => COLOURS[key] ?? COLOURS.plain!;

function plot(name: string, opts: uPlot.Options, data: uPlot.AlignedData): ChartHost {
  const host: ChartHost = h("div", { class: "chart", "data-chart": name });
  host.uplot = new uPlot(opts, data, host);
  return host;
}

// Destroys the charts under `root` (their listeners on window go with them).
export function destroyCharts(root: ParentNode): void {
  for (const el of root.querySelectorAll<ChartHost>("div.chart")) {
    el.uplot?.destroy();
    el.uplot = undefined;
  }
}

export interface BarSeries { key: string; label: string; values: number[] }

// Bars over categories (GPU models, reasons, budgets, days), one bar per category with the
// series stacked in it, the first at the bottom: each series is drawn from the running total
// below it to its own running total, so that none covers another, and the legend lists them
// as given, bottom of the stack first (uPlot's stacked charts read the same way). The legend
// and the tooltip give each series' own value. `lines` are drawn as lines over the bars (a
// budget's share and demand a day).
export function bars(name: string, labels: string[], series: BarSeries[],
  { width = 560, height = 200, unit = "", lines = [] as BarSeries[], max = 0, xLabel = "" } = {}):
  ChartHost {
  const n = labels.length;
  const totals: number[][] = [];
  let run = labels.map(() => 0);
  for (const s of series) {
    run = run.map((v, i) => v + (s.values[i] ?? 0));
    totals.push(run);
  }
  const zeros = labels.map(() => 0);
  const own = (si: number, i: number | null): string => {
    if (i === null) return "–";
    const s = si <= series.length ? series[si - 1]! : lines[si - series.length - 1]!;
    return `${+(s.values[i] ?? 0).toFixed(2)}${unit}`;
  };
  // Data units (uPlot's BarsPathBuilderFacetUnit.ScaleValue; a const enum esbuild cannot read).
  const inData = 1 as uPlot.Series.BarsPathBuilderFacetUnit;
  const barPaths = (k: number): uPlot.Series.PathBuilder => uPlot.paths.bars!({
    size: [0.7, 80], align: 0, disp: {
      y0: { unit: inData, values: () => (k ? totals[k - 1]! : zeros) },
      y1: { unit: inData, values: () => totals[k]! } } });
  const long = Math.max(0, ...labels.map((l) => l.length));
  return plot(name, {
    width, height: height + (long > 8 ? long * 4 : 0),
    scales: { x: { time: false, range: [-0.5, n - 0.5] },
      y: { range: (_u, _min, top) => [0, max > 0 ? max : Math.max(1, top) * 1.05] } },
    axes: [
      { splits: () => labels.map((_, i) => i), values: (_u, ticks) => ticks.map((t) => labels[t] ?? ""),
        rotate: long > 8 ? -30 : 0, size: long > 8 ? 30 + long * 5 : 40, grid: { show: false } },
      { size: 50 },
    ],
    series: [
      { label: xLabel, value: (_u, v) => (v === null ? "–" : labels[v] ?? "") },
      ...series.map((s, k) => ({ label: s.label, fill: colour(s.key), stroke: colour(s.key),
        width: 0, paths: barPaths(k), points: { show: false },
        value: (_u: uPlot, _v: number | null, si: number, idx: number | null) => own(si, idx) })),
      ...lines.map((l) => ({ label: l.label, stroke: colour(l.key), width: 2,
        dash: l.key === "share" ? [6, 4] : undefined, points: { show: false },
        value: (_u: uPlot, _v: number | null, si: number, idx: number | null) => own(si, idx) })),
    ],
    legend: { show: true },
  }, [labels.map((_, i) => i), ...totals, ...lines.map((l) => l.values)]);
}

export interface Point { t: number; v: number }

// A value over time (seconds), points oldest first: a line with a dot per point, from 0 to
// `max`. Small (a sparkline) without axes, or with them.
export function sparkline(name: string, points: Point[],
  { width = 240, height = 48, max = 100, unit = "", key = "allocated" } = {}): ChartHost {
  return plot(name, {
    width, height,
    cursor: { show: true, points: { show: true }, drag: { x: false, y: false } },
    legend: { show: false },
    scales: { x: { time: true }, y: { range: [0, max > 0 ? max : 1] } },
    axes: [{ show: false }, { show: false }],
    series: [{}, { label: name, stroke: colour(key), width: 1.5, points: { show: true, size: 4 },
      value: (_u, v) => (v === null ? "–" : `${v}${unit}`) }],
  }, [points.map((p) => p.t), points.map((p) => p.v)]);
}

// Several values over time on one chart with axes (the cluster's metrics day by day).
export interface LineSeries { key: string; label: string; values: (number | null)[] }
export function lines(name: string, times: number[], series: LineSeries[],
  { width = 560, height = 200, unit = "", max = 0 } = {}): ChartHost {
  const palette = ["#2b6cb0", "#d69e2e", "#38a169", "#9f7aea", "#c53030"];
  return plot(name, {
    width, height,
    scales: { x: { time: true }, y: max > 0 ? { range: [0, max] } : {} },
    axes: [{}, { size: 50, values: (_u, ts) => ts.map((t) => `${+t.toFixed(2)}${unit}`) }],
    series: [{}, ...series.map((s, i) => ({ label: s.label,
      stroke: COLOURS[s.key] ?? palette[i % palette.length]!, width: 2,
      points: { show: true, size: 6 },
      value: (_u: uPlot, v: number | null) => (v === null ? "–" : `${+v.toFixed(2)}${unit}`) }))],
  }, [times, ...series.map((s) => s.values)]);
}

// Events on one time line, coloured by what happened: [{time, label, kind}] up to `now`.
export interface TimelineEvent { time: number; label: string; kind: string }
export function timeline(name: string, events: TimelineEvent[], now: number,
  { width = 900 } = {}): ChartHost {
  const group = (k: string): string => (k === "running" ? "allocated" : ["preempted", "requeued",
    "failed"].includes(k) ? "down" : "plain");
  // Drawn in this order: a stop is never hidden under another event of the same second.
  const groups = ["plain", "allocated", "down"];
  const names: Record<string, string> = { allocated: "started", down: "stopped", plain: "other" };
  const xs = [...events.map((e) => e.time), now];
  const ys = groups.map((g) => [...events.map((e) => (group(e.kind) === g ? 0 : null)), null]);
  return plot(name, {
    width, height: 90,
    scales: { x: { time: true }, y: { range: [-1, 1] } },
    axes: [{}, { show: false }],
    series: [{}, ...groups.map((g) => ({ label: names[g], stroke: colour(g), fill: colour(g),
      paths: () => null, points: { show: true, size: 12, fill: colour(g) },
      value: (_u: uPlot, _v: number | null, _si: number, i: number | null) =>
        (i === null || i >= events.length ? "–" : events[i]!.label) }))],
  }, [xs, ...ys]);
}
