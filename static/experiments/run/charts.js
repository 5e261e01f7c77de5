// The run page's charts: one per metric, drawn from the stored history (downsampled on the server) and grown with
// live points (run/live.js), which go onto a chart's live tail between plotly's draws (below).
import {changeText, finishedStatuses, showNearest} from "./details.js";
import {keepExtremes} from "../lib/downsample.js";
import {foldedGroup} from "../lib/folded_group.js";
import {liveXRange, tailPoints, tailWithinAxes, untilPlotlyDraws} from "../lib/live_tail.js";
import {flatRange, smoother} from "../lib/smoothing.js";

const page = document.getElementById("run-page");
const chartList = document.getElementById("charts");
// charts in this order first, the rest by name
const firstKeys = ["rollout/episode_return", "charts/episodic_return", "eval/return_mean", "rollout/episode_length",
                   "charts/episodic_length", "train/loss", "train/epsilon", "train/entropy", "train/learning_rate",
                   "time/steps_per_second"];  // rlweb's, then CleanRL's names of the same
const maxLivePoints = 4000;  // a series that grows past this keeps the smallest and largest of each 4 points
const plotlyInterval = 3000;  // ms: live points wait on a chart's tail at most this long for plotly (tails below)

const charts = new Map();  // metric key -> chart (chartFor)
export const controls = {smoothing: 0.6, xAxis: "step", logY: false};  // the controls above the charts
const marks = [];  // hyperparameter changes applied (events): a dashed line on every chart at their step
let revision = 0;
// The run's last event came (endCharts): every chart is brought up to date, on screen or not. run/live.js reads
// it too, through the import's live binding.
export let ended = false;

// Live points are drawn on the charts on screen; the others when they scroll into view. A hidden tab draws none
// (it has no animation frames either): its charts are brought up to date when it is shown.
const onScreen = new Set();
const observer = new IntersectionObserver((entries) => {
  for (const entry of entries) {
    const chart = entry.target.chart;
    if (!entry.isIntersecting) {
      onScreen.delete(chart);
    } else {
      onScreen.add(chart);
      if (chart.stale) draw(chart);
    }
  }
}, {rootMargin: "100px"});
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) charts.forEach((chart) => { if (chart.stale && onScreen.has(chart)) draw(chart); });
});

const plotConfig = {responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"]};

// --- charts ---------------------------------------------------------------------------------------

function isNumber(value) {
  return typeof value === "number" && Number.isFinite(value);
}

// A `..._std` drawn as the band of its `..._mean` gets no chart of its own.
function isBandOf(key, keys) {
  return key.endsWith("_std") && keys.has(key.slice(0, -4) + "_mean");
}

function chartOrder(key) {
  const index = firstKeys.indexOf(key);
  return index >= 0 ? String(index).padStart(3, "0") : "zzz" + key;
}

function chartFor(key) {
  let chart = charts.get(key);
  if (chart) return chart;
  const card = document.createElement("figure");
  card.className = "chart-card";
  card.dataset.metric = key;
  const title = document.createElement("figcaption");
  title.textContent = key;
  const note = document.createElement("span");
  note.className = "muted chart-note";
  title.append(" ", note);
  const element = document.createElement("div");
  element.className = "chart";
  element.setAttribute("role", "img");
  element.setAttribute("aria-label", `${key} against ${controls.xAxis === "step" ? "env steps" : "wall time"}`);
  card.append(title, element);
  const list = key.startsWith("system/") ? systemList() : chartList;
  const after = [...list.children].find((other) => chartOrder(other.dataset.metric) > chartOrder(key));
  list.insertBefore(card, after || null);
  document.getElementById("charts-empty").hidden = true;
  // step, time, value (low, high: a band): the points to draw, in plotly's order; count: how many the metric has
  // (the history is downsampled); smoothed: the smoothed line of `value`, grown by `smoother`; extent: the
  // smallest and largest y; drawn: how many points plotly has; whole: plotly must draw it whole (not append);
  // stale: plotly lacks some points.
  // (tail, plotlyAt, flushTimer, zoomed: live points between plotly's draws, below)
  chart = {key, element, note, step: [], time: [], value: [], low: null, high: null, count: 0, throughSeq: 0,
           smoothed: [], smoother: null, extent: [Infinity, -Infinity], drawn: 0, whole: true, stale: false,
           shape: "", tail: null, plotlyAt: -Infinity, flushTimer: null, zoomed: {x: false, y: false}};
  resetDerived(chart);
  charts.set(key, chart);
  element.chart = chart;
  observer.observe(element);
  return chart;
}

// The System group (trainer/system_metrics.py: CPU, memory, GPUs, where the training time went), below the main
// charts and folded until opened. Plotly sizes a chart drawn while folded (at the run's end) when it is opened.
function systemList() {
  let group = document.getElementById("system-group");
  if (!group) {
    const list = document.createElement("div");
    list.id = "system-charts";
    list.className = "charts";
    group = foldedGroup("system-group", 'System <span class="muted">CPU, memory, GPUs and where the training time ' +
                        "goes, sampled every few seconds</span>", list);
    chartList.after(group);
  }
  return group.querySelector("#system-charts");
}

// The smoothed line and the y extent, which live points extend one at a time (lib/smoothing.js).
function resetDerived(chart) {
  chart.smoother = controls.smoothing > 0 ? smoother(controls.smoothing) : null;
  chart.smoothed = chart.smoother ? chart.value.map(chart.smoother) : [];
  chart.extent = [Infinity, -Infinity];
  for (const values of [chart.value, chart.low, chart.high]) (values || []).forEach((value) => widen(chart, value));
}

function widen(chart, value) {
  if (!isNumber(value)) return;
  if (value < chart.extent[0]) chart.extent[0] = value;
  if (value > chart.extent[1]) chart.extent[1] = value;
}

// The y columns of the traces, in their order: the band (high, then low), the raw values, the smoothed line.
function yColumns(chart) {
  return [...(chart.low ? [chart.high, chart.low] : []), chart.value, ...(chart.smoother ? [chart.smoothed] : [])];
}

// What a drawn chart must be drawn whole again for (anything but more points): its traces, their mode, its
// y range when flat. Live points that keep it are appended.
function shapeOf(chart) {
  const flat = controls.logY ? undefined : flatRange([chart.extent]);
  return JSON.stringify([yColumns(chart).length, chart.value.length > 60, flat || null]);
}

function xValues(chart) {
  return controls.xAxis === "step" ? chart.step : chart.time;
}

// Published learning curves for this run's task and algorithm (Dopamine's, in agent steps; _run_standing.html),
// behind the run's own training returns: the band of the published runs and their mean, dashed.
const baselineCurves = JSON.parse(document.getElementById("run-baseline-curves")?.textContent || "[]");

function baselineTraces(chart) {
  if (chart.key !== "rollout/episode_return" || controls.xAxis !== "step") return [];
  return baselineCurves.flatMap((curve) => [
    {x: curve.steps, y: curve.high, mode: "lines", type: "scatter", line: {width: 0}, hoverinfo: "skip", showlegend: false},
    {x: curve.steps, y: curve.low, mode: "lines", type: "scatter", line: {width: 0}, fill: "tonexty",
     fillcolor: "rgba(110, 110, 110, 0.14)", hoverinfo: "skip", name: `${curve.label} ${curve.band}`},
    {x: curve.steps, y: curve.mean, mode: "lines", type: "scatter", line: {width: 1.5, dash: "dash", color: "#6b7080"},
     name: `${curve.label} (${curve.published_env_id}; ${curve.x_note})`, hovertemplate: "%{y:.4~g}<extra>%{fullData.name}</extra>"},
  ]);
}

// Plotly gets copies (its data is what it drew; the chart's arrays grow with live points before that).
function traces(chart) {
  const x = xValues(chart).slice();
  const hover = "%{y:.4~g}<extra>%{fullData.name}</extra>";
  const drawn = baselineTraces(chart);
  if (chart.low) {
    drawn.push({x, y: chart.high.slice(), mode: "lines", type: "scatter", line: {width: 0}, hoverinfo: "skip",
                showlegend: false, name: "mean + std"});
    drawn.push({x: x.slice(), y: chart.low.slice(), mode: "lines", type: "scatter", line: {width: 0},
                fill: "tonexty", fillcolor: "rgba(217, 83, 79, 0.15)", hoverinfo: "skip", name: "± std"});
  }
  const smoothed = chart.smoother !== null;
  const faint = smoothed && chart.value.length > 1;  // one point has no line to show it: drawn plain and larger
  drawn.push({x: x.slice(), y: chart.value.slice(), name: "raw", type: "scatter",
              mode: chart.value.length > 60 ? "lines" : "lines+markers",
              line: {width: 1, color: faint ? "rgba(59, 110, 214, 0.28)" : "#3b6ed6"},
              marker: {size: chart.value.length > 1 ? 3 : 7, color: faint ? "rgba(59, 110, 214, 0.28)" : "#3b6ed6"},
              hovertemplate: hover});
  if (smoothed) {
    drawn.push({x: x.slice(), y: chart.smoothed.slice(), name: "smoothed", type: "scatter", mode: "lines",
                line: {width: 2, color: "#1f3f8a"}, hovertemplate: hover});
  }
  return drawn;
}

// A vertical dashed line at each change's step (or time), labelled with the names it changed.
function markShapes() {
  const x = (mark) => (controls.xAxis === "step" ? mark.step : mark.time);
  return {
    shapes: marks.map((mark) => ({type: "line", xref: "x", yref: "paper", x0: x(mark), x1: x(mark), y0: 0, y1: 1,
                                  line: {color: "#d9822b", width: 1.5, dash: "dash"}})),
    annotations: marks.map((mark) => ({xref: "x", yref: "paper", x: x(mark), y: 1, xanchor: "left", yanchor: "top",
                                       showarrow: false, text: Object.keys(mark.values.changes || {}).join(", "),
                                       hovertext: `step ${mark.step}: ${changeText(mark.values)}`,
                                       font: {size: 10, color: "#a35200"}, bgcolor: "rgba(255,255,255,0.7)"})),
  };
}

// RL Zoo's published final score for this run's task and algorithm (_run_standing.html), a band (mean ± std) across
// the return charts, its label saying after how many agent steps it was published.
const baselines = JSON.parse(document.getElementById("run-baselines")?.textContent || "[]");

function withBaselines(chart, marked) {
  const bands = ["eval/return_mean", "rollout/episode_return"].includes(chart.key) ? baselines : [];
  const curves = chart.key === "rollout/episode_return" && controls.xAxis === "step" ? baselineCurves : [];
  if (!bands.length && !curves.length) return marked;
  const note = {showarrow: false, font: {size: 10, color: "#555b6e"}, bgcolor: "rgba(255, 255, 255, 0.7)"};
  return {
    shapes: [...marked.shapes, ...bands.map((band) => ({
      type: "rect", xref: "paper", x0: 0, x1: 1, yref: "y", y0: band.mean - band.std, y1: band.mean + band.std,
      layer: "below", fillcolor: "rgba(110, 110, 110, 0.14)",
      line: band.std ? {width: 0} : {width: 1.5, dash: "dot", color: "rgba(110, 110, 110, 0.7)"}}))],
    annotations: [...marked.annotations,
      ...bands.map((band) => ({...note, xref: "paper", x: 0.01, xanchor: "left", yref: "y", y: band.mean,
                               text: `${band.text} (${band.published_env_id})`, hovertext: band.x_note})),
      ...curves.map((curve, index) => ({...note, xref: "paper", x: 1, xanchor: "right", yref: "paper",
                                        y: 0.02 + 0.08 * index, yanchor: "bottom",
                                        text: `dashed: ${curve.label} on ${curve.published_env_id}, x in agent steps`,
                                        hovertext: `${curve.x_note}; band: ${curve.band}`}))],
  };
}

// Both axes' types are given (plotly would guess them from the data on every draw) and tick labels may reach past
// the chart's edge (plotly would measure each one to hide those): a draw costs about a third less.
function layout(chart) {
  revision += 1;
  const flat = controls.logY ? undefined : flatRange([chart.extent]);
  const range = xRange(chart);
  return {
    ...withBaselines(chart, markShapes()),
    uirevision: controls.xAxis + controls.logY,  // zoom and pan survive new points, not a change of axis
    datarevision: revision,
    margin: {l: 56, r: 12, t: 6, b: 40},
    xaxis: {title: {text: controls.xAxis === "step" ? "env steps" : "wall time (s)"}, type: "linear",
            gridcolor: "#e7eaf0", zeroline: false, ticklabeloverflow: "allow",
            ...(range ? {range, autorange: false} : {autorange: true})},
    yaxis: {type: controls.logY ? "log" : "linear", gridcolor: "#e7eaf0", zeroline: false, automargin: true,
            ticklabeloverflow: "allow",
            ...(flat ? {range: flat, autorange: false} : {autorange: true})},
    showlegend: false,
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    font: {family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 12, color: "#2b3040"},
    hovermode: "x unified",
  };
}

// Draw the chart whole with plotly, its live tail taken in.
function draw(chart) {
  chart.stale = false;
  chart.whole = false;
  chart.shape = shapeOf(chart);
  chart.drawn = chart.value.length;
  chart.plotlyAt = performance.now();
  clearTimeout(chart.flushTimer);
  chart.flushTimer = null;
  showCount(chart);
  return Plotly.react(chart.element, traces(chart), layout(chart), plotConfig).then(() => {
    if (chart.tail) chart.tail.svg.replaceChildren();
    if (chart.clickable) return;
    chart.clickable = true;  // plotly keeps its handlers across react()
    chart.element.on("plotly_click", (click) => showNearest(chart.step[click.points[0].pointIndex]));
    chart.element.on("plotly_relayout", (change) => noticeZoom(chart, change));
  });
}

function showCount(chart) {
  const shown = chart.value.length;
  chart.note.textContent = shown < chart.count ? `${shown} of ${chart.count} points drawn`
    : `${chart.count} point${chart.count === 1 ? "" : "s"}`;
}

// --- live points between plotly's draws --------------------------------------------------------------
// Plotly draws a whole chart for any change, appending points too (extendTraces recomputes the figure: 5-20 ms
// a chart, more than a frame for the 2-4 charts on screen). So a live point first goes onto its chart's tail:
// an SVG polyline per line (raw, smoothed) over the plot area, from the last point plotly drew, placed with the
// axes it drew; a fraction of a millisecond. Plotly takes the tail in `plotlyInterval` ms after its last draw,
// or at once when a point falls outside its axes. While the run trains, its x axis leaves room on the right for
// about 100 more points (`xRange`), unless the user zoomed: then the tail is cut at the plot area's edges.

function liveRun() {
  return !ended && !finishedStatuses.includes(page.dataset.status);
}

// The x range of a chart of a live run: its points and as much again as its last 100 took (at least 5%);
// undefined (plotly's autorange) once the run has ended. A chart the user zoomed keeps the range they chose
// (plotly would otherwise take ours: it keeps a zoom across draws only while the range we give does not change).
// A chart whose points all sit at one x (a single evaluation) gets a padded range, not plotly's band a step wide.
function xRange(chart) {
  if (chart.zoomed.x && chart.element.layout) return Array.from(chart.element.layout.xaxis.range);
  return liveXRange(xValues(chart), liveRun());
}

// The user zoomed or panned an axis, or double-clicked back to the whole chart.
function noticeZoom(chart, change) {
  for (const axis of ["x", "y"]) {
    if (`${axis}axis.autorange` in change) chart.zoomed[axis] = false;
    else if (Object.keys(change).some((key) => key.startsWith(`${axis}axis.range`))) chart.zoomed[axis] = true;
  }
}

// Whether the points plotly lacks can go onto the tail: plotly drew this chart with the same traces, no markers
// and no band, and each point lies within its axes (on an axis the user zoomed, the tail is cut instead).
function tailFits(chart) {
  const full = chart.element._fullLayout;
  if (chart.whole || !full || chart.low || shapeOf(chart) !== chart.shape || chart.value.length <= 60) return false;
  return tailWithinAxes(xValues(chart), chart.value, chart.drawn, {
    xRange: full.xaxis.range, yRange: full.yaxis.range, toLinearY: (value) => full.yaxis.c2l(value),
    zoomed: chart.zoomed});
}

// The tail: from the last point plotly drew to the newest, in pixels of the axes plotly drew.
function drawTail(chart) {
  const full = chart.element._fullLayout;
  const xa = full.xaxis;
  const ya = full.yaxis;
  if (chart.tail && !chart.tail.svg.isConnected) chart.element.append(chart.tail.svg);
  if (!chart.tail) {
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("class", "live-tail");
    svg.setAttribute("aria-hidden", "true");
    chart.tail = {svg};
    chart.element.append(svg);
  }
  const svg = chart.tail.svg;
  Object.assign(svg.style, {left: `${xa._offset}px`, top: `${ya._offset}px`, width: `${xa._length}px`,
                            height: `${ya._length}px`});
  const x = xValues(chart);
  const lines = [[chart.value, "raw"], ...(chart.smoother ? [[chart.smoothed, "smoothed"]] : [])];
  svg.replaceChildren(...lines.map(([values, name]) => {
    const points = tailPoints(x, values, chart.drawn, (value) => xa.c2p(value), (value) => ya.c2p(value));
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("class", `live-tail-${name}${chart.smoother ? " is-smoothed" : ""}`);
    line.setAttribute("points", points);
    return line;
  }));
  showCount(chart);
  chart.stale = false;
  if (chart.flushTimer === null) {
    chart.flushTimer = setTimeout(() => {
      chart.flushTimer = null;
      if (chart.drawn >= chart.value.length) return;
      if ((onScreen.has(chart) && !document.hidden) || ended) draw(chart);
      else chart.stale = true;
    }, untilPlotlyDraws(chart.plotlyAt, plotlyInterval, performance.now()));
  }
}

// A live point on screen: onto the tail when it fits, else plotly draws the chart.
function drawLive(chart) {
  if (!tailFits(chart)) return draw(chart);
  drawTail(chart);
  return Promise.resolve();
}

// After a change of the controls: every chart, whole (a new axis forgets the zoom).
export function drawAll() {
  return Promise.all([...charts.values()].map((chart) => {
    resetDerived(chart);
    chart.zoomed = {x: false, y: false};
    return draw(chart);
  }));
}

// Keep the smallest and the largest point of each 4, in their order: extremes stay, the count shrinks.
function compact(chart) {
  const columns = {step: chart.step, time: chart.time, value: chart.value,
                   ...(chart.low ? {low: chart.low, high: chart.high} : {})};
  Object.assign(chart, keepExtremes(columns));
  resetDerived(chart);  // the smoothed line of the points kept, as a whole draw would smooth them
  chart.whole = true;
}

export function loadSeries(metrics) {
  const keys = new Set(Object.keys(metrics));
  for (const key of Object.keys(metrics).sort((a, b) => chartOrder(a).localeCompare(chartOrder(b)))) {
    if (isBandOf(key, keys)) continue;
    const series = metrics[key];
    const chart = chartFor(key);
    Object.assign(chart, {step: series.step, time: series.time, value: series.value, count: series.count,
                          low: series.low || null, high: series.high || null, throughSeq: series.through_seq});
    resetDerived(chart);
    chart.whole = true;
  }
}

// A metric event's values become points of their charts; returns the charts that changed.
export function addPoints(event, changed) {
  const keys = new Set(Object.keys(event.values));
  for (const [key, value] of Object.entries(event.values)) {
    if (!isNumber(value) || isBandOf(key, keys)) continue;
    const chart = chartFor(key);
    if (event.seq <= chart.throughSeq) continue;  // already in the history
    chart.step.push(event.step);
    chart.time.push(event.time);
    chart.value.push(value);
    widen(chart, value);
    if (chart.smoother) chart.smoothed.push(chart.smoother(value));
    const spread = key.endsWith("_mean") ? event.values[key.slice(0, -5) + "_std"] : undefined;
    if (isNumber(spread)) {
      if (!chart.low) {  // the band's traces come first: drawn whole
        chart.low = chart.value.slice(0, -1);
        chart.high = chart.value.slice(0, -1);
      }
      chart.low.push(value - spread);
      chart.high.push(value + spread);
      widen(chart, value - spread);
      widen(chart, value + spread);
    } else if (chart.low) {
      chart.low.push(value);
      chart.high.push(value);
    }
    chart.count += 1;
    chart.throughSeq = event.seq;
    if (chart.value.length > maxLivePoints) compact(chart);
    changed.add(chart);
  }
}

// A hyperparameter change applied: a mark on every chart, which each draws whole.
export function addMark(event, changed) {
  marks.push(event);
  charts.forEach((chart) => { chart.whole = true; changed.add(chart); });
}

export function loadMarks(changes) {
  marks.push(...changes);
}

// The run's last event came: every chart is to be brought up to date, on screen or not (a print, a screenshot),
// with its x axis fitting its points again.
export function endCharts() {
  ended = true;
  charts.forEach((chart) => { chart.stale = true; });
}

// The charts to draw at the next frame: those on screen that lack points, or every one once the run has ended.
export function dueCharts() {
  return [...charts.values()].filter((chart) => chart.stale && (ended || onScreen.has(chart)));
}

// Draw them: live points onto the tails where they fit; plotly draws the rest whole, and all of them at the end.
export function drawCharts(due) {
  return Promise.all(due.map(ended ? draw : drawLive));
}
