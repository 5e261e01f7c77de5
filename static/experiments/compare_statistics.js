// The compare page's statistics across tasks: per group of runs, rliable's IQM, median, mean and optimality gap of
// the normalised scores with 95% intervals, the probability of improvement between two groups, performance
// profiles and sample-efficiency curves. The server computes them off the request and caches them
// (compare_stats.py): an answer of 202 means "under way", and the page asks again until they are there.
// The options live in the page's URL too (lib/query_state.js), so a shared link shows the same statistics.
import {STATISTICS_KEYS, mergeQuery, readStatistics, statisticsParams} from "./lib/query_state.js";

const section = document.getElementById("statistics");
const form = document.getElementById("statistics-options");
const statusLine = document.getElementById("statistics-status");
const table = document.getElementById("statistics-table");
const improvementLine = document.getElementById("statistics-improvement");
const notes = document.getElementById("statistics-notes");
const lastLabel = document.getElementById("statistics-last-label");
const charts = document.getElementById("statistics-charts");
const metrics = [["iqm", "IQM"], ["median", "median"], ["mean", "mean"], ["optimality_gap", "optimality gap"]];
const palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
let request = 0;
let timer = null;

function colour(index, alpha = 1) {
  const hex = palette[index % palette.length];
  const [r, g, b] = [1, 3, 5].map((start) => parseInt(hex.slice(start, start + 2), 16));
  return `rgba(${r}, ${g}, ${b}, ${alpha})`;
}

// The options a shared link asks for: the lists and N set at once; the pair of P(X > Y) asked of the server
// until its groups are known and the choices filled.
const fromUrl = readStatistics(window.location.search, Object.fromEntries(["by", "metric", "count"].map(
  (name) => [name, [...form.elements[name].options].map((option) => option.value)])));
for (const name of ["by", "metric", "count", "last"]) if (fromUrl[name]) form.elements[name].value = fromUrl[name];

function query() {
  const params = new URLSearchParams({runs: section.dataset.runIds});
  for (const name of ["improve", "over"]) if (fromUrl[name]) params.set(name, fromUrl[name]);
  for (const [name, value] of new FormData(form)) if (value !== "") params.set(name, value);
  return params;
}

function saveOptionsInUrl() {
  const values = Object.fromEntries(new FormData(form));
  window.history.replaceState(null, "", mergeQuery(window.location.search, STATISTICS_KEYS, statisticsParams(values)));
}

async function load(delay = 400) {
  clearTimeout(timer);
  const mine = ++request;
  lastLabel.hidden = form.elements.count.value !== "last";
  let response;
  try {
    response = await fetch(`${section.dataset.url}?${query()}`);
  } catch (error) {
    statusLine.textContent = "The server did not answer; trying again.";
    timer = setTimeout(load, 5000);
    return;
  }
  const answer = await response.json().catch(() => null);
  if (mine !== request) return;
  if (response.status === 202) {  // under way: ask again, a little later each time
    if (answer.state === "partial") drawTable(answer);  // the table is there; the charts are still computed
    statusLine.textContent = answer.state === "partial" ? "Computing the performance profiles and sample-efficiency curves…"
      : `Computing the bootstrap intervals for ${answer.groups.length} group${answer.groups.length === 1 ? "" : "s"}…`;
    timer = setTimeout(() => load(Math.min(2 * delay, 3000)), delay);
    return;
  }
  if (!response.ok || !answer || answer.state === "failed") {
    statusLine.textContent = (answer && answer.error) || `The statistics could not be loaded (HTTP ${response.status}).`;
    return;
  }
  draw(answer);
}

function interval([point, low, high], digits = 2) {
  const cell = document.createElement("td");
  cell.className = "number";
  cell.append(point.toFixed(digits), " ");
  const span = document.createElement("span");
  span.className = "interval";
  span.textContent = `[${low.toFixed(digits)}, ${high.toFixed(digits)}]`;
  cell.append(span);
  return cell;
}

function fillChoices(select, groups, wanted) {
  const keep = groups.includes(select.value) ? select.value : wanted;
  select.replaceChildren(...groups.map((group) => new Option(group, group)));
  if (keep) select.value = keep;
}

function draw(result) {
  const groups = result.groups;
  const scale = result.normalised ? "normalised score" : "score";
  statusLine.textContent = groups.length
    ? `${groups.length} group${groups.length === 1 ? "" : "s"} · ${scale}s · ${result.reps.toLocaleString()} bootstrap draws${result.cached ? " · from the cache" : ""}`
    : "No runs with a score to aggregate.";
  drawTable(result);
  charts.hidden = !groups.length;  // no scores: no empty axes
  if (groups.length) {
    drawProfiles(result, scale);
    drawEfficiency(result, scale);
  }
  section.dataset.ready = "1";  // browser tests wait for this
}

function drawTable(result) {
  const groups = result.groups;
  table.hidden = !groups.length;
  table.tBodies[0].replaceChildren(...groups.map((group, index) => {
    const row = document.createElement("tr");
    row.dataset.group = group;
    const name = document.createElement("th");
    name.scope = "row";
    name.innerHTML = `<span class="swatch" style="display:inline-block;width:.7rem;height:.7rem;border-radius:2px;background:${colour(index)}"></span> `;
    name.append(group);
    const size = document.createElement("td");
    size.className = "number";
    size.textContent = `${result.runs[group]} × ${result.tasks[group].length}`;
    row.append(name, size);
    for (const [key] of metrics) {
      if (key === "optimality_gap" && !result.normalised) row.append(Object.assign(document.createElement("td"), {textContent: "–", className: "number"}));
      else row.append(interval(result.aggregates[group][key]));
    }
    return row;
  }));
  fillChoices(form.elements.improve, groups, result.improvement?.x);
  fillChoices(form.elements.over, groups, result.improvement?.y);
  const improvement = result.improvement;
  improvementLine.hidden = !improvement;
  if (improvement) {
    improvementLine.textContent = improvement.value
      ? `P(${improvement.x} > ${improvement.y}) = ${improvement.value[0].toFixed(2)} [${improvement.value[1].toFixed(2)}, ${improvement.value[2].toFixed(2)}] over ${improvement.tasks.length} task${improvement.tasks.length === 1 ? "" : "s"}: the probability that a run of ${improvement.x} beats one of ${improvement.y} on a task, averaged over tasks.`
      : `${improvement.x} and ${improvement.y} share no task: no probability of improvement.`;
  }
  notes.replaceChildren(...result.notes.map((text) => Object.assign(document.createElement("li"), {textContent: text})));
}

function bandTraces(x, series, index, name) {
  return [
    {x, y: series.low, type: "scatter", mode: "lines", line: {width: 0}, hoverinfo: "skip", showlegend: false},
    {x, y: series.high, type: "scatter", mode: "lines", line: {width: 0}, fill: "tonexty",
     fillcolor: colour(index, 0.18), hoverinfo: "skip", showlegend: false},
    {x, y: series.point, name, type: "scatter", mode: "lines", line: {color: colour(index), width: 2}},
  ];
}

function layout(xTitle, yTitle) {
  return {margin: {l: 56, r: 12, t: 8, b: 44}, xaxis: {title: {text: xTitle}, gridcolor: "#e7eaf0", zeroline: false},
          yaxis: {title: {text: yTitle}, gridcolor: "#e7eaf0", zeroline: false},
          legend: {orientation: "h", x: 0, y: 1.02, yanchor: "bottom"}, paper_bgcolor: "rgba(0,0,0,0)",
          plot_bgcolor: "rgba(0,0,0,0)", font: {family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 12}};
}

function drawProfiles(result, scale) {
  const traces = result.groups.flatMap((group, index) => {
    const profile = result.profiles[group];
    return bandTraces(profile.taus, profile, index, group);
  });
  Plotly.react("statistics-profiles", traces, layout(`${scale} τ`, "fraction of runs with score > τ"),
               {responsive: true, displaylogo: false});
}

function drawEfficiency(result, scale) {
  const chart = document.getElementById("statistics-efficiency");
  chart.hidden = !result.efficiency;
  document.getElementById("statistics-efficiency-empty").hidden = Boolean(result.efficiency);
  if (!result.efficiency) return;
  const traces = result.groups.flatMap((group, index) =>
    bandTraces(result.efficiency.steps, result.efficiency.groups[group], index, group));
  Plotly.react(chart, traces, layout("env steps (agent steps; on Atari 1 step = 4 frames)", `IQM of ${scale}`),
               {responsive: true, displaylogo: false});
}

form.addEventListener("change", () => {
  section.dataset.ready = "";  // until the statistics of the new options are drawn
  saveOptionsInUrl();
  load();
});
form.addEventListener("submit", (event) => { event.preventDefault(); load(); });
load();
