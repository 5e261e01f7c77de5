// The compare page: every metric the selected runs share, overlaid (one colour per run) or as group means
// with a band; smoothing, x axis and log scale; a summary table; videos at the nearest matching steps.
//
// The curves, group means and bands come from compare-data, downsampled and aggregated on the server.
// While a run is still training, one push stream for all the runs shown (/compare/stream) says when any of
// them reports, and the page then fetches compare-data again: no polling (only a failed request is retried).
// One stream, where one per run would need more connections than a browser opens to one site (six over
// HTTP/1.1); and the group means stay the server's, with no second aggregation written in JavaScript.
import {retryDelay} from "./lib/retry.js";
import {flatRange, smooth} from "./lib/smoothing.js";
import {foldedGroup} from "./lib/folded_group.js";
import {mergeQuery} from "./lib/query_state.js";

const page = document.getElementById("compare-page");
const groupSelect = document.getElementById("group");
const bandSelect = document.getElementById("band");
const xSelect = document.getElementById("x-axis");
const smoothingInput = document.getElementById("smoothing");
const smoothingValue = document.getElementById("smoothing-value");
const logInput = document.getElementById("log-scale");
const thresholdInput = document.getElementById("threshold");
const statusLine = document.getElementById("compare-status");
const chartList = document.getElementById("compare-charts");
const liveIndicator = document.getElementById("live-indicator");
const retryMilliseconds = 5000;  // after a failed request
const rawLinesUpTo = 8;  // with more runs, faint raw lines behind the smoothed ones are only clutter
const palette = [  // Tableau 20, then golden-angle hues
  [31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40], [148, 103, 189], [140, 86, 75],
  [227, 119, 194], [127, 127, 127], [188, 189, 34], [23, 190, 207], [174, 199, 232], [255, 187, 120],
  [152, 223, 138], [255, 152, 150], [197, 176, 213], [196, 156, 148], [247, 182, 210], [199, 199, 199],
  [219, 219, 141], [158, 218, 229]];

let data = null;
let request = 0;  // a newer request makes an older answer stale
let pollTimer = null;  // a retry after a failed request, or the next fetch the live stream asked for
let liveSource = null;  // one push stream for all the runs shown: it says when any of them reports
let lastFetchMilliseconds = 0;
let videoSignature = "";
const hidden = new Set();  // legend entries switched off

function colour(index, alpha = 1) {
  if (index < palette.length) return `rgba(${palette[index].join(", ")}, ${alpha})`;
  return `hsla(${Math.round(index * 137.5) % 360}, 60%, 45%, ${alpha})`;
}

// --- the URL holds the selection and every option, so the page can be bookmarked and shared ----------
function serverQuery() {
  const query = new URLSearchParams({runs: page.dataset.runIds});
  if (groupSelect.value !== "run") query.set("group", groupSelect.value);
  if (bandSelect.value !== "std") query.set("band", bandSelect.value);
  if (xSelect.value !== "step") query.set("x", xSelect.value);
  if (thresholdInput.value.trim() !== "") query.set("threshold", thresholdInput.value.trim());
  return query;
}

function pageQuery() {
  const query = serverQuery();
  query.set("smooth", smoothingInput.value);
  if (logInput.checked) query.set("log", "1");
  return query;
}

function readOptionsFromUrl() {
  const query = new URLSearchParams(window.location.search);
  const weight = Number(query.get("smooth"));
  if (query.has("smooth") && weight >= 0 && weight <= 0.99) smoothingInput.value = weight;
  logInput.checked = query.get("log") === "1";
  smoothingValue.textContent = Number(smoothingInput.value).toFixed(2);
}

const PAGE_KEYS = ["runs", "group", "band", "x", "threshold", "smooth", "log"];  // the statistics' keys are kept

function saveOptionsInUrl() {
  window.history.replaceState(null, "", mergeQuery(window.location.search, PAGE_KEYS, pageQuery()));
}

// --- data -----------------------------------------------------------------------------------------------
// The first request is the one the page preloads (while plotly.js is parsed); later ones follow the options.
async function load() {
  clearTimeout(pollTimer);
  pollTimer = null;
  const mine = ++request;
  const url = mine === 1 ? page.dataset.firstUrl : `${page.dataset.dataUrl}?${serverQuery()}`;
  const fetchStart = performance.now();
  let response;
  try {
    response = await fetch(url);
    lastFetchMilliseconds = performance.now() - fetchStart;
  } catch (error) {
    if (mine === request) retryLater("The server did not answer; trying again.");
    return;
  }
  const answer = await response.json().catch(() => null);  // an error page, or the login page
  if (mine !== request) return;
  if (!response.ok || answer === null) {
    const message = (answer && answer.error) || `The comparison could not be loaded (HTTP ${response.status}).`;
    if (response.status === 400) statusLine.textContent = message;  // asking again would not help
    else retryLater(`${message} Trying again.`);
    return;
  }
  data = answer;
  await draw();
  if (mine !== request) return;  // the options changed while drawing: the newer answer takes over
  drawSummary();
  drawVideos();
  if (!page.dataset.ready) {  // the first full drawing: benchmarks and browser tests wait for this
    await new Promise((resolve) => requestAnimationFrame(resolve));
    performance.mark("compare-page-drawn");
    page.dataset.ready = "1";
  }
  const active = data.runs.some((run) => run.active);
  liveIndicator.hidden = !active;
  if (active) followLiveRuns();
}

function retryLater(message) {
  statusLine.textContent = message;
  pollTimer = setTimeout(load, retryMilliseconds);
}

// While runs are live, one push stream says when any of them reports; the data is fetched again then, at
// most once a second (or every two fetch times, when the server takes long to answer), never while quiet.
// After an HTTP error the browser gives up on a stream for good (it reconnects only after a dropped
// connection): then the data is fetched again, which opens a new one, after 2 s, doubling up to a minute.
let streamFailures = 0;

function followLiveRuns() {
  if (liveSource) return;
  // from what was drawn: points stored between the data's fetch and this stream's start are announced at once
  const drawn = data.runs.map((run) => `${run.id}:${run.drawn_through}`).join(",");
  const source = new EventSource(`${page.dataset.streamUrl}&after=${drawn}`);
  liveSource = source;
  const fetchSoon = () => {
    if (pollTimer === null) pollTimer = setTimeout(load, Math.max(1000, 2 * lastFetchMilliseconds));
  };
  source.onopen = () => { streamFailures = 0; };
  source.onerror = () => {
    if (source !== liveSource || source.readyState !== EventSource.CLOSED) return;
    liveSource = null;
    streamFailures += 1;
    setTimeout(fetchSoon, retryDelay(streamFailures));
  };
  source.addEventListener("runs", fetchSoon);
  source.addEventListener("end", () => {
    source.close();
    liveSource = null;
    fetchSoon();  // the last points and the final numbers
  });
}

// --- charts -----------------------------------------------------------------------------------------------
function entries() {  // what the legend lists: the runs, or the groups
  if (!grouped()) return data.runs.map((run, index) => ({id: `run-${run.id}`, label: run.label, index, run}));
  const groups = data.metrics.length ? data.metrics[0].groups : [];
  return groups.map((group, index) => ({id: `group-${group.label}`, label: group.label, index, group}));
}

function grouped() {
  return data.options.group !== "run";
}

function runTraces(metric, weight) {
  const traces = [];
  const rawLines = weight > 0 && data.runs.length - hidden.size <= rawLinesUpTo;
  data.runs.forEach((run, index) => {
    const series = metric.runs[run.id];
    if (!series || hidden.has(`run-${run.id}`)) return;
    const x = series.x;
    if (rawLines) {  // the raw points stay faint behind the smoothed line, as on the run page
      traces.push({x, y: series.value, type: "scatter", mode: "lines", line: {color: colour(index, 0.22), width: 1},
                   hoverinfo: "skip", showlegend: false});
    }
    traces.push({x, y: smooth(series.value, weight), name: run.label, type: "scatter",
                 mode: series.value.length < 60 ? "lines+markers" : "lines", line: {color: colour(index), width: 1.8},
                 marker: {size: 5}});
  });
  return traces;
}

function groupTraces(metric, weight) {
  const traces = [];
  metric.groups.forEach((group, index) => {
    if (!group.seeds || hidden.has(`group-${group.label}`)) return;
    const name = `${group.label} (n=${group.seeds})`;
    traces.push({x: group.x, y: smooth(group.lower, weight), type: "scatter", mode: "lines", line: {width: 0},
                 hoverinfo: "skip", showlegend: false});
    traces.push({x: group.x, y: smooth(group.upper, weight), type: "scatter", mode: "lines", line: {width: 0},
                 fill: "tonexty", fillcolor: colour(index, 0.2), hoverinfo: "skip", showlegend: false});
    traces.push({x: group.x, y: smooth(group.mean, weight), name, type: "scatter", mode: "lines",
                 line: {color: colour(index), width: 2.2}});
  });
  return traces;
}

// A metric that is constant (episode lengths of Pendulum, an epsilon at its end) gets a padded y range: its
// smoothed values differ from the raw ones by rounding, which plotly's autorange drew as steps and drops.
function layout(metric, traces) {
  const flat = logInput.checked ? undefined : flatRange(traces.map((trace) => trace.y));
  return {
    margin: {l: 60, r: 16, t: 8, b: 44},
    xaxis: {title: {text: data.options.x === "step" ? "env steps" : "wall time (s)"}, gridcolor: "#e7eaf0",
            zeroline: false},
    yaxis: {title: {text: metric.key}, type: logInput.checked ? "log" : "linear", gridcolor: "#e7eaf0",
            zeroline: false, ...(flat ? {range: flat, autorange: false} : {autorange: true})},
    showlegend: false,  // one legend for every chart, above them; exported images get their own
    legend: {orientation: "h", x: 0, y: -0.18, yanchor: "top"},
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    font: {family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 12, color: "#2b3040"},
    hovermode: "closest",
    uirevision: `${metric.key} ${data.options.x} ${logInput.checked}`,  // keep the user's zoom across redraws
    ...baselineBands(metric),
  };
}

// Published final scores (RL Zoo) of the runs' task and algorithms, as bands (mean ± std) across the return charts:
// a final score, so the band spans every step; its label says after how many agent steps it was published.
function baselineBands(metric) {
  const curves = baselineCurveTraces(metric).length ? data.baseline_curves : [];
  if (curves.length && !data.baselines?.length) return {annotations: curveNotes(curves)};
  if (!data.baselines?.length || !["eval/return_mean", "rollout/episode_return"].includes(metric.key)) return {};
  return {
    shapes: data.baselines.map((band) => ({type: "rect", xref: "paper", x0: 0, x1: 1, yref: "y", layer: "below",
                                            y0: band.mean - band.std, y1: band.mean + band.std,
                                            line: band.std ? {width: 0} : {width: 1.5, dash: "dot", color: "rgba(110, 110, 110, 0.7)"},
                                            fillcolor: "rgba(110, 110, 110, 0.14)"})),
    annotations: data.baselines.map((band) => ({xref: "paper", x: 0.01, xanchor: "left", yref: "y", y: band.mean,
                                                 showarrow: false, font: {size: 10, color: "#555b6e"},
                                                 text: `${band.text} (${band.published_env_id})`,
                                                 hovertext: band.x_note})).concat(curveNotes(curves)),
  };
}

function curveNotes(curves) {  // on the chart: the published curves' x axis is agent steps too
  return curves.map((curve, index) => ({xref: "paper", x: 1, xanchor: "right", yref: "paper", y: 0.02 + 0.08 * index,
                                        yanchor: "bottom", showarrow: false, font: {size: 10, color: "#555b6e"},
                                        bgcolor: "rgba(255, 255, 255, 0.7)", hovertext: curve.x_note,
                                        text: `dashed: ${curve.label} on ${curve.published_env_id}, x in agent steps`}));
}

function fileName(metric) {
  return `compare-${metric.key.replace(/[^A-Za-z0-9]+/g, "-")}`;
}

// An exported image carries the legend that the page shows once above all charts.
function downloadWithLegend(chart, format) {
  const figure = {data: chart.data, layout: {...chart.layout, showlegend: true,
                                             margin: {...chart.layout.margin, b: 160}}};
  Plotly.downloadImage(figure, {format, width: 1200, height: 760, filename: chart.dataset.fileName});
}

function config(metric) {
  return {
    responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"],
    toImageButtonOptions: {format: "png", filename: fileName(metric), scale: 2},
    modeBarButtonsToAdd: [
      {name: "Download SVG with legend", icon: Plotly.Icons.disk, click: (chart) => downloadWithLegend(chart, "svg")},
      {name: "Download PNG with legend", icon: Plotly.Icons.camera, click: (chart) => downloadWithLegend(chart, "png")},
    ],
  };
}

function chartFor(metric) {
  const id = `chart-${metric.key.replace(/[^A-Za-z0-9]+/g, "-")}`;
  let chart = document.getElementById(id);
  if (!chart) {
    const card = document.createElement("section");
    card.className = "card chart-card";
    card.dataset.metric = metric.key;
    const title = document.createElement("h2");
    title.textContent = metric.key;
    chart = document.createElement("div");
    chart.id = id;
    chart.className = "chart";
    chart.setAttribute("role", "img");
    chart.setAttribute("aria-label", `${metric.key} of the compared runs`);
    card.append(title, chart);
    if (metric.key.startsWith("system/")) systemGroup().querySelector(".compare-charts").append(card);
    else chartList.insertBefore(card, document.getElementById("compare-system-group"));
  }
  chart.dataset.fileName = fileName(metric);
  return chart;
}

// The System group (trainer/system_metrics.py: CPU, memory, GPUs, where the training time went), after the other
// charts and folded until opened; plotly sizes the charts drawn while it was folded when it opens.
function systemGroup() {
  let group = document.getElementById("compare-system-group");
  if (!group) {
    const list = document.createElement("div");
    list.className = "compare-charts";
    group = foldedGroup("compare-system-group",
                        'System <span class="muted">CPU, memory, GPUs and where the training time goes</span>', list);
    chartList.append(group);
  }
  return group;
}

// Published learning curves (Dopamine's, in agent steps) of the runs' task and algorithms, behind the runs' training
// returns: the band of the published runs and their mean, dashed.
function baselineCurveTraces(metric) {
  if (metric.key !== "rollout/episode_return" || data.options.x !== "step" || !data.baseline_curves) return [];
  return data.baseline_curves.flatMap((curve) => [
    {x: curve.steps, y: curve.high, type: "scatter", mode: "lines", line: {width: 0}, hoverinfo: "skip", showlegend: false},
    {x: curve.steps, y: curve.low, type: "scatter", mode: "lines", line: {width: 0}, fill: "tonexty",
     fillcolor: "rgba(110, 110, 110, 0.14)", hoverinfo: "skip", showlegend: false},
    {x: curve.steps, y: curve.mean, type: "scatter", mode: "lines", line: {width: 1.5, dash: "dash", color: "#6b7080"},
     name: `${curve.label} (${curve.published_env_id}; ${curve.x_note}; band: ${curve.band})`},
  ]);
}

function draw() {
  const weight = Number(smoothingInput.value);
  const keys = new Set(data.metrics.map((metric) => metric.key));
  chartList.querySelectorAll(".chart-card").forEach((card) => { if (!keys.has(card.dataset.metric)) card.remove(); });
  document.getElementById("compare-system-group")?.toggleAttribute("hidden", ![...keys].some((key) => key.startsWith("system/")));
  const drawn = data.metrics.map((metric) => {
    const traces = [...baselineCurveTraces(metric), ...(grouped() ? groupTraces(metric, weight) : runTraces(metric, weight))];
    return Plotly.react(chartFor(metric), traces, layout(metric, traces), config(metric));
  });
  drawLegend();
  describe();
  return Promise.all(drawn);
}

function drawLegend() {
  let legend = document.getElementById("compare-legend");
  if (!legend) {
    legend = document.createElement("ul");
    legend.id = "compare-legend";
    legend.className = "compare-legend";
    chartList.before(legend);
  }
  legend.replaceChildren(...entries().map((entry) => {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.entry = entry.id;
    button.setAttribute("aria-pressed", String(!hidden.has(entry.id)));
    button.title = hidden.has(entry.id) ? "Show" : "Hide";
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = colour(entry.index);
    const label = document.createElement("span");
    label.textContent = entry.group ? `${entry.label} (n=${entry.group.seeds})` : entry.label;
    button.append(swatch, label);
    button.addEventListener("click", () => {
      if (hidden.has(entry.id)) hidden.delete(entry.id); else hidden.add(entry.id);
      draw();
    });
    item.append(button);
    return item;
  }));
}

function describe() {
  const empty = data.without_points;
  const parts = [`${data.runs.length} run${data.runs.length === 1 ? "" : "s"}`,
                 `${data.metrics.length} shared metric${data.metrics.length === 1 ? "" : "s"}`];
  if (grouped()) parts.push(`bands: ${bandSelect.options[bandSelect.selectedIndex].text}`);
  if (empty.length) parts.push(`no points yet from ${empty.map((id) => `#${id}`).join(", ")}`);
  if (!data.metrics.length && data.runs.length > empty.length) parts.push("these runs have no metric in common");
  statusLine.textContent = parts.join(" · ");
}

// --- summary -------------------------------------------------------------------------------------------
function number(value, digits = 1) {
  return value === null || value === undefined ? "–" : value.toFixed(digits);
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function drawSummary() {
  const rows = data.summary.map((row) => {
    const tr = document.createElement("tr");
    tr.dataset.run = row.run;
    const name = document.createElement("td");
    const link = document.createElement("a");
    link.href = data.runs.find((run) => run.id === row.run).url;
    link.textContent = row.label;
    name.append(link);
    const status = document.createElement("td");
    const badge = document.createElement("span");
    badge.className = `status status-${row.status}`;
    badge.textContent = row.status;
    status.append(badge);
    const reached = row.steps_to_threshold === null ? (thresholdInput.value.trim() ? "not reached" : "–")
      : row.steps_to_threshold.toLocaleString("en");
    tr.append(name, status, cell(number(row.final_eval_return), "number"), cell(number(row.best_eval_return), "number"),
              cell(reached, "number"), cell(duration(row.wall_seconds), "number"),
              cell(row.steps_per_second === null ? "–" : Math.round(row.steps_per_second).toLocaleString("en"), "number"),
              cell(row.device || "–"));
    return tr;
  });
  document.querySelector("#summary-table tbody").replaceChildren(...rows);
}

// --- videos: one per run, the nearest to the chosen step ----------------------------------------------
function runColour(run) {  // the colour the charts give the run: its own, or its group's
  if (!grouped()) return colour(data.runs.indexOf(run));
  const groups = data.metrics.length ? data.metrics[0].groups : [];
  return colour(Math.max(0, groups.findIndex((group) => group.runs.includes(run.id))));
}

function drawVideos() {
  const signature = JSON.stringify([data.videos, data.options.group]);
  if (signature === videoSignature) return;  // a fetch with nothing new must not restart playing videos
  videoSignature = signature;
  const stepSelect = document.getElementById("video-step");
  const steps = [...new Set(Object.values(data.videos).flat().map((video) => video.step))].sort((a, b) => a - b);
  document.getElementById("video-empty").hidden = steps.length > 0;
  document.getElementById("video-step-label").hidden = steps.length === 0;
  const chosen = stepSelect.value ? Number(stepSelect.value) : steps[steps.length - 1];
  stepSelect.replaceChildren(...steps.map((step) => new Option(step.toLocaleString("en"), step, false, step === chosen)));
  showVideosNear(steps.length ? Number(stepSelect.value) : null);
}

function showVideosNear(step) {
  const grid = document.getElementById("video-grid");
  const missing = document.getElementById("video-missing");
  const recorded = step === null ? [] : data.runs.filter((run) => (data.videos[run.id] || []).length);
  const without = step === null ? [] : data.runs.filter((run) => !recorded.includes(run));
  missing.hidden = without.length === 0;
  missing.textContent = `No video from ${without.map((run) => `#${run.id}`).join(", ")}.`;
  grid.replaceChildren(...recorded.map((run) => {
    const nearest = data.videos[run.id].reduce(
      (best, video) => Math.abs(video.step - step) < Math.abs(best.step - step) ? video : best);
    const figure = document.createElement("figure");
    figure.style.borderTopColor = runColour(run);
    const player = document.createElement("video");
    player.src = `${nearest.url}#t=0.001`;  // the fragment makes the browser show the first frame
    player.controls = true;
    player.muted = true;
    player.playsInline = true;
    player.preload = "metadata";
    const caption = document.createElement("figcaption");
    const episodeReturn = nearest.episode_return === null ? "" : ` · return ${nearest.episode_return.toFixed(1)}`;
    caption.textContent = `${run.label} · step ${nearest.step.toLocaleString("en")}${episodeReturn}`;
    figure.append(player, caption);
    return figure;
  }));
}

// --- controls ------------------------------------------------------------------------------------------
function refetch() {
  saveOptionsInUrl();
  load();
}

function redraw() {
  smoothingValue.textContent = Number(smoothingInput.value).toFixed(2);
  saveOptionsInUrl();
  if (data) draw();
}

let thresholdTimer = null;
groupSelect.addEventListener("change", () => { hidden.clear(); refetch(); });
bandSelect.addEventListener("change", refetch);
xSelect.addEventListener("change", refetch);
smoothingInput.addEventListener("input", redraw);
logInput.addEventListener("change", redraw);
thresholdInput.addEventListener("input", () => {
  clearTimeout(thresholdTimer);
  thresholdTimer = setTimeout(refetch, 400);
});
document.getElementById("video-step").addEventListener("change", (event) => showVideosNear(Number(event.target.value)));
document.getElementById("show-all-settings").addEventListener("change", (event) => {
  document.getElementById("hp-table").classList.toggle("show-all", event.target.checked);
});

readOptionsFromUrl();
load();
