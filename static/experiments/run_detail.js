// The run page: draw the stored history (one chart per metric, downsampled on the server), then follow
// the live stream and add points, log lines, checkpoints and videos as they come.
// Every event has a sequence number `seq`. The history says up to which seq each metric holds
// (`through_seq`) and where the stream picks up (`last_seq`), so no point is lost or drawn twice, also
// after the browser reconnects (it sends Last-Event-ID).
(function () {
  "use strict";

  const page = document.getElementById("run-page");
  const statusLabel = document.getElementById("run-status");
  const progress = document.getElementById("run-progress");
  const progressText = document.getElementById("run-progress-text");
  const liveIndicator = document.getElementById("live-indicator");
  const chartList = document.getElementById("charts");
  const logList = document.getElementById("log-list");
  const totalSteps = Number(page.dataset.totalSteps);
  // The run's duration counts every attempt. The one this page sees end is counted in `data-attempts`
  // unless the page was drawn before a worker claimed it; earlier attempts' seconds do not change meanwhile.
  const earlierSeconds = Number(page.dataset.earlierSeconds);
  const attempts = Number(page.dataset.attempts) + (page.dataset.status === "queued" ? 1 : 0);
  const finishedStatuses = ["succeeded", "failed", "cancelled", "lost", "pruned"];
  const metricKinds = ["episode", "train", "eval", "time"];
  const logKinds = ["started", "checkpoint", "video", "eval", "hyperparameters", "finished", "failed"];
  // charts in this order first, the rest by name
  const firstKeys = ["rollout/episode_return", "eval/return_mean", "rollout/episode_length", "train/loss",
                     "train/epsilon", "train/entropy", "train/learning_rate", "time/steps_per_second"];
  const maxLivePoints = 4000;  // a series that grows past this keeps the smallest and largest of each 4 points
  const maxLogLines = 500;

  const maxUnreported = 10_000;  // seqs kept for the "drawn" report while the tab is hidden (no frames)
  const plotlyInterval = 3000;  // ms: live points wait on a chart's tail at most this long for plotly (tails below)

  const charts = new Map();  // metric key -> chart (chartFor)
  const controls = {smoothing: 0.6, xAxis: "step", logY: false};
  const marks = [];  // hyperparameter changes applied (events): a dashed line on every chart at their step
  let stepsDone = Number(progress.value);
  let episodeCount = 0;
  let bestEval = null;
  let revision = 0;
  let ended = false;  // the run's last event came: every chart is brought up to date, on screen or not

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
    const after = [...chartList.children].find((other) => chartOrder(other.dataset.metric) > chartOrder(key));
    chartList.insertBefore(card, after || null);
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

  // The smoothed line and the y extent, which live points extend one at a time (smoothing.js).
  function resetDerived(chart) {
    chart.smoother = controls.smoothing > 0 ? window.rlwebSmoother(controls.smoothing) : null;
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
    const flat = controls.logY ? undefined : window.rlwebFlatRange([chart.extent]);
    return JSON.stringify([yColumns(chart).length, chart.value.length > 60, flat || null]);
  }

  function xValues(chart) {
    return controls.xAxis === "step" ? chart.step : chart.time;
  }

  // Plotly gets copies (its data is what it drew; the chart's arrays grow with live points before that).
  function traces(chart) {
    const x = xValues(chart).slice();
    const hover = "%{y:.4~g}<extra>%{fullData.name}</extra>";
    const drawn = [];
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

  function changeText(values) {
    return Object.entries(values.changes || {}).map(([name, change]) => `${name} ${change.old} → ${change.new}`).join(", ");
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

  // Both axes' types are given (plotly would guess them from the data on every draw) and tick labels may reach past
  // the chart's edge (plotly would measure each one to hide those): a draw costs about a third less.
  function layout(chart) {
    revision += 1;
    const flat = controls.logY ? undefined : window.rlwebFlatRange([chart.extent]);
    const range = xRange(chart);
    return {
      ...markShapes(),
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
    const x = xValues(chart);
    if (x.length && x[0] === x[x.length - 1]) return window.rlwebFlatRange([[x[0]]]);
    if (!liveRun() || x.length < 2) return undefined;
    const low = Math.min(x[0], x[x.length - 1]);
    const high = Math.max(x[0], x[x.length - 1]);
    const recent = x[x.length - 1] - x[Math.max(0, x.length - 101)];
    return high > low ? [low, high + Math.max(recent, 0.05 * (high - low))] : undefined;
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
    const x = xValues(chart);
    const xRangeDrawn = [...full.xaxis.range].sort((a, b) => a - b);
    const yRangeDrawn = [...full.yaxis.range].sort((a, b) => a - b);
    for (let index = chart.drawn; index < chart.value.length; index++) {
      const y = full.yaxis.c2l(chart.value[index]);
      if (!chart.zoomed.x && (x[index] < xRangeDrawn[0] || x[index] > xRangeDrawn[1])) return false;
      if (!chart.zoomed.y && !(y >= yRangeDrawn[0] && y <= yRangeDrawn[1])) return false;
    }
    return true;
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
      const points = [];
      for (let index = Math.max(0, chart.drawn - 1); index < values.length; index++) {
        if (isNumber(values[index])) points.push(`${xa.c2p(x[index]).toFixed(1)},${ya.c2p(values[index]).toFixed(1)}`);
      }
      const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
      line.setAttribute("class", `live-tail-${name}${chart.smoother ? " is-smoothed" : ""}`);
      line.setAttribute("points", points.join(" "));
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
      }, Math.max(0, chart.plotlyAt + plotlyInterval - performance.now()));
    }
  }

  // A live point on screen: onto the tail when it fits, else plotly draws the chart.
  function drawLive(chart) {
    if (!tailFits(chart)) return draw(chart);
    drawTail(chart);
    return Promise.resolve();
  }

  // --- a clicked point: the video and the checkpoint nearest to its step ------------------------------

  function nearestTo(step, items) {
    const distance = (item) => Math.abs(Number(item.dataset.step) - step);
    return items.reduce((best, item) => (best === null || distance(item) < distance(best) ? item : best), null);
  }

  function showNearest(step) {
    if (!isNumber(step)) return;
    document.querySelectorAll(".is-nearest").forEach((element) => element.classList.remove("is-nearest"));
    const checkpoint = nearestTo(step, [...document.querySelectorAll("#checkpoint-list li[data-step]")]);
    const figure = nearestTo(step, [...document.querySelectorAll("#video-list figure[data-step]")]);
    const found = [];
    if (checkpoint) {
      checkpoint.classList.add("is-nearest");
      const list = checkpoint.parentElement;  // scrolled within itself, the page stays where the video is
      list.scrollTop = checkpoint.offsetTop - list.offsetTop - (list.clientHeight - checkpoint.offsetHeight) / 2;
      found.push(`checkpoint ${checkpoint.querySelector("a").textContent} (step ${checkpoint.dataset.step})`);
    }
    if (figure) {
      figure.classList.add("is-nearest");
      figure.scrollIntoView({behavior: "smooth", block: "center"});
      const video = figure.querySelector("video");
      video.muted = true;  // episodes have no sound, and a muted video may always play
      video.currentTime = 0;
      video.play().catch(() => {});  // a browser may refuse to play before the user has interacted
      found.push(`the video of step ${figure.dataset.step}`);
    }
    document.getElementById("nearest-note").textContent =
      `Step ${step}: ${found.length ? found.join(" and ") : "no video or checkpoint yet"}.`;
  }

  // After a change of the controls: every chart, whole (a new axis forgets the zoom).
  function drawAll() {
    return Promise.all([...charts.values()].map((chart) => {
      resetDerived(chart);
      chart.zoomed = {x: false, y: false};
      return draw(chart);
    }));
  }

  // Keep the smallest and the largest point of each 4, in their order: extremes stay, the count shrinks.
  function compact(chart) {
    const columns = ["step", "time", "value", ...(chart.low ? ["low", "high"] : [])];
    const kept = Object.fromEntries(columns.map((column) => [column, []]));
    for (let start = 0; start < chart.value.length; start += 4) {
      const indexes = [0, 1, 2, 3].map((offset) => start + offset).filter((index) => index < chart.value.length);
      const smallest = indexes.reduce((a, b) => (chart.value[b] < chart.value[a] ? b : a));
      const largest = indexes.reduce((a, b) => (chart.value[b] > chart.value[a] ? b : a));
      for (const index of [...new Set([smallest, largest])].sort((a, b) => a - b)) {
        for (const column of columns) kept[column].push(chart[column][index]);
      }
    }
    Object.assign(chart, kept);
    resetDerived(chart);  // the smoothed line of the points kept, as a whole draw would smooth them
    chart.whole = true;
  }

  function loadSeries(metrics) {
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
    const returns = metrics["rollout/episode_return"];
    if (returns) episodeCount = returns.count;
    const evals = metrics["eval/return_mean"];
    if (evals && evals.value.length) bestEval = Math.max(...evals.value);
    const speed = metrics["time/steps_per_second"];
    if (speed && speed.value.length && !finishedStatuses.includes(page.dataset.status)) {  // else: the average
      document.getElementById("steps-per-second").textContent = Math.round(speed.value[speed.value.length - 1]);
    }
  }

  // A metric event's values become points of their charts; returns the charts that changed.
  function addPoints(event, changed) {
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

  // --- the rest of the page -------------------------------------------------------------------------

  function setStatus(status) {
    statusLabel.textContent = status;
    statusLabel.className = "status status-" + status;
    page.dataset.status = status;
    if (finishedStatuses.includes(status)) {
      const cancelForm = document.getElementById("cancel-form");
      if (cancelForm) cancelForm.remove();
      const changeCard = document.getElementById("live-change");
      if (changeCard) changeCard.remove();
      liveIndicator.hidden = true;
    }
  }

  function setProgress(steps) {
    stepsDone = Math.max(stepsDone, steps);
    progress.value = Math.min(stepsDone, totalSteps);
    progressText.textContent = `${stepsDone} / ${totalSteps} steps`;
  }

  function showError(message) {
    document.getElementById("run-error-text").textContent = message;
    document.getElementById("run-error").hidden = false;
  }

  function showNumbers(event) {
    const values = event.values;
    if (event.kind === "eval" && isNumber(values["eval/return_mean"])) {
      const spread = isNumber(values["eval/return_std"]) ? ` ± ${values["eval/return_std"].toFixed(1)}` : "";
      document.getElementById("eval-return").textContent = values["eval/return_mean"].toFixed(1) + spread;
      bestEval = bestEval === null ? values["eval/return_mean"] : Math.max(bestEval, values["eval/return_mean"]);
    }
    if (event.kind === "time" && isNumber(values["time/steps_per_second"])) {
      document.getElementById("steps-per-second").textContent = Math.round(values["time/steps_per_second"]);
    }
    if (bestEval !== null) document.getElementById("best-eval-return").textContent = bestEval.toFixed(1);
    document.getElementById("episode-count").textContent = episodeCount || "–";
  }

  function checkpointItem(id, tag, step, url) {
    const item = document.createElement("li");
    item.dataset.checkpointId = id;
    item.dataset.step = step;
    const link = document.createElement("a");
    link.dataset.checkpointTag = tag;
    link.href = url;
    link.download = "";
    link.textContent = tag;
    const stepText = document.createElement("span");
    stepText.className = "muted";
    stepText.textContent = ` step ${step}`;
    item.append(link, stepText);
    return item;
  }

  // The checkpoints the run has now (from the history): replaces the list.
  function showCheckpoints(checkpoints) {
    const list = document.getElementById("checkpoint-list");
    list.replaceChildren(...checkpoints.map((c) => checkpointItem(c.id, c.tag, c.step, c.url)));
    document.getElementById("checkpoint-empty").hidden = checkpoints.length > 0;
    offerCheckpoints();
  }

  // The "Act on a checkpoint" form offers the checkpoints the list shows, newest first.
  function offerCheckpoints() {
    const form = document.getElementById("checkpoint-job-form");
    const select = document.getElementById("id_checkpoint");
    const chosen = select.value;
    const items = [...document.querySelectorAll("#checkpoint-list li[data-checkpoint-id]")]
      .sort((a, b) => Number(b.dataset.step) - Number(a.dataset.step));
    select.replaceChildren(...items.map((item) => new Option(
      `${item.querySelector("a").dataset.checkpointTag}, step ${item.dataset.step}`, item.dataset.checkpointId)));
    if (items.some((item) => item.dataset.checkpointId === chosen)) select.value = chosen;
    form.hidden = items.length === 0;
  }

  // A checkpoint saved while we watch: a new "best" or "final" replaces the one before.
  function addCheckpoint(values) {
    const list = document.getElementById("checkpoint-list");
    if (!values.checkpoint_id || list.querySelector(`li[data-checkpoint-id="${values.checkpoint_id}"]`)) return;
    if (values.tag !== "periodic") {
      list.querySelectorAll(`a[data-checkpoint-tag="${values.tag}"]`).forEach((link) => link.parentElement.remove());
    }
    const url = page.dataset.downloadUrl.replace("/0/", `/${values.checkpoint_id}/`);
    list.append(checkpointItem(values.checkpoint_id, values.tag, values.step, url));
    document.getElementById("checkpoint-empty").hidden = true;
    offerCheckpoints();
  }

  // A video recorded while we watch goes first: the gallery is newest first.
  function addVideo(values) {
    const list = document.getElementById("video-list");
    if (!values.video_id || list.querySelector(`[data-video-id="${values.video_id}"]`)) return;
    const figure = document.createElement("figure");
    figure.className = "video";
    figure.dataset.videoId = values.video_id;
    figure.dataset.step = values.step;
    const video = document.createElement("video");
    video.controls = true;
    video.preload = "metadata";
    video.src = page.dataset.videoUrl.replace("/0/", `/${values.video_id}/`) + "#t=0.1";  // shows a first frame
    const caption = document.createElement("figcaption");
    const episodeReturn = isNumber(values.episode_return) ? ` · return ${values.episode_return.toFixed(1)}` : "";
    caption.textContent = `step ${values.step}${episodeReturn}`;
    figure.append(video, caption);
    list.prepend(figure);
    document.getElementById("video-empty").hidden = true;
  }

  function logText(event) {
    const values = event.values;
    switch (event.kind) {
      case "started": {
        const notes = Array.isArray(values.notes) && values.notes.length ? ` · note: ${values.notes.join(" ")}` : "";
        return `started ${values.algorithm || ""} on ${values.env_id || ""} (${values.device || "?"}, seed ${values.seed})${notes}`;
      }
      case "checkpoint":
        return values.error ? `checkpoint ${values.tag || ""}: ${values.error}` : `checkpoint saved: ${values.tag}`;
      case "video":
        return values.error ? values.error : `video recorded: return ${isNumber(values.episode_return) ? values.episode_return.toFixed(1) : "?"}`;
      case "eval":
        return `evaluation: return ${isNumber(values["eval/return_mean"]) ? values["eval/return_mean"].toFixed(2) : "?"}` +
          (isNumber(values["eval/return_std"]) ? ` ± ${values["eval/return_std"].toFixed(2)}` : "");
      case "hyperparameters":
        return values.error ? `change refused: ${values.error}` : `changed ${changeText(values)}`;
      case "finished":
        return `finished: ${values.status}` + (isNumber(values.seconds) ? ` after ${values.seconds.toFixed(1)} s` : "") +
          (values.reason ? ` (${values.reason})` : "");
      case "failed":
        return `failed: ${values.error}`;
      default:
        return event.kind;
    }
  }

  // A checkpoint or video that could not be written (an event with an `error`): counted next to the status.
  let warningCount = 0;
  function showWarning(event) {
    warningCount += 1;
    document.getElementById("run-warnings-text").textContent =
      `${warningCount} warning${warningCount > 1 ? "s" : ""}, the latest: ${logText(event)}`;
    document.getElementById("run-warnings").hidden = false;
  }

  function addLogLine(event) {
    const item = document.createElement("li");
    item.className = "log-" + event.kind + (event.kind !== "failed" && event.values.error ? " log-warning" : "");
    if (event.kind !== "failed" && event.values.error) showWarning(event);
    item.dataset.seq = event.seq;
    const where = document.createElement("span");
    where.className = "log-where";
    where.textContent = `step ${event.step} · ${event.time.toFixed(1)} s`;
    const text = document.createElement("span");
    text.textContent = logText(event);
    item.append(where, text);
    if (event.kind === "failed" && event.values.traceback) {
      const details = document.createElement("details");
      const summary = document.createElement("summary");
      summary.textContent = "Traceback";
      const pre = document.createElement("pre");
      pre.textContent = event.values.traceback;
      details.append(summary, pre);
      item.append(details);
    }
    const atBottom = logList.scrollHeight - logList.scrollTop - logList.clientHeight < 40;
    logList.append(item);
    while (logList.children.length > maxLogLines) logList.firstElementChild.remove();
    if (atBottom) logList.scrollTop = logList.scrollHeight;  // follow the newest line unless scrolled up
    document.getElementById("log-empty").hidden = true;
  }

  // --- following the run ----------------------------------------------------------------------------

  function apply(events) {
    const changed = new Set();
    for (const event of events) {
      setProgress(event.step);
      if (metricKinds.includes(event.kind)) addPoints(event, changed);
      if (event.kind === "episode") episodeCount += 1;
      if (logKinds.includes(event.kind)) addLogLine(event);
      if (event.kind === "started") {
        setStatus("running");
        if (event.values.device) document.getElementById("device-used").textContent = event.values.device;
      } else if (event.kind === "checkpoint") addCheckpoint(event.values);
      else if (event.kind === "video") addVideo(event.values);
      else if (event.kind === "hyperparameters" && !event.values.error) {
        marks.push(event);
        charts.forEach((chart) => { chart.whole = true; changed.add(chart); });  // every chart gets the mark
      }
      else if (event.kind === "finished" || event.kind === "failed") {
        setStatus(event.kind === "failed" ? "failed" : event.values.status);
        if (event.kind === "failed") showError(event.values.error);
        showEnd(isNumber(event.values.seconds) ? event.values.seconds : event.time);  // this attempt's
      }
      showNumbers(event);
      if (event.kind === "finished" || event.kind === "failed") endLive();
    }
    changed.forEach((chart) => { chart.stale = true; });
  }

  // The run's last event came: every chart is brought up to date at the next frame, on screen or not (a print, a
  // screenshot), with its x axis fitting its points again.
  function endLive() {
    ended = true;
    charts.forEach((chart) => { chart.stale = true; });
    if (frame === null) frame = requestAnimationFrame(onFrame);
  }

  // `attemptSeconds`: how long the attempt that ended trained (its `seconds`; event times are on the run's
  // clock, which a resumed run carries on from its checkpoint).
  function showEnd(attemptSeconds) {
    document.getElementById("run-finished").textContent = "just now";
    const seconds = earlierSeconds + attemptSeconds;
    if (seconds > 0 && stepsDone > 0) {  // the average over the run, as the page shows a finished run's
      const speed = document.getElementById("steps-per-second");
      speed.textContent = Math.round(stepsDone / seconds);
      speed.title = "the average over the run";
    }
    const text = seconds < 60 ? `${seconds.toFixed(1)} s`  // as run_views.duration_text writes it
      : seconds < 3600 ? `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`
        : `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
    document.getElementById("run-duration").textContent = attempts > 1 ? `${text} over ${attempts} attempts` : text;
  }

  // Live events arrive one by one and go into the charts' data at once; the charts on screen are drawn at the next
  // animation frame, with every point that came before it. At the frame after, those points are on screen: the
  // page tells whoever listens (tests, benchmarks) and draws what came meanwhile. A hidden tab has no frames: its
  // charts wait, their data does not.
  let unreported = [];  // {seq, receivedAt} of the events applied and not yet drawn
  let drawnBatch = null;  // drawn at the last frame: {batch, drawStart, drawEnd}
  let frame = null;

  function receive(event, receivedAt) {
    if (event.seq <= lastReceived) return;  // a page shown again from the back-forward cache may get one twice
    lastReceived = event.seq;
    apply([event]);
    unreported.push({seq: event.seq, receivedAt});
    if (unreported.length > maxUnreported) unreported = unreported.slice(-maxUnreported);
    if (frame === null) frame = requestAnimationFrame(onFrame);
  }

  function onFrame() {
    if (drawnBatch) {  // on screen since this frame began
      const {batch, drawStart, drawEnd} = drawnBatch;
      drawnBatch = null;
      const seqs = batch.map((item) => item.seq);
      page.dataset.drawnSeq = seqs[seqs.length - 1];
      window.dispatchEvent(new CustomEvent("run-page:drawn", {detail: {
        seqs, received: batch.map((item) => item.receivedAt), drawStart, drawEnd, drawn: performance.now()}}));
    }
    const due = [...charts.values()].filter((chart) => chart.stale && (ended || onScreen.has(chart)));
    if (!unreported.length && !due.length) {
      frame = null;
      return;
    }
    const batch = unreported;
    unreported = [];
    const drawStart = performance.now();
    frame = Promise.all(due.map(ended ? draw : drawLive)).then(() => {
      drawnBatch = batch.length ? {batch, drawStart, drawEnd: performance.now()} : null;
      frame = requestAnimationFrame(onFrame);
    });
  }

  // Follow the run from `lastSeq` on. A browser opens at most 6 connections to a site: with a stream per page, a
  // seventh run page (and every other page of the site) would wait for one. So the first two run pages open follow
  // their runs over streams of their own, the fastest path, and the others through the shared worker that holds one
  // stream for all of them (live_worker.js: one process hop more). Without shared workers, every page has its own.
  let lastReceived = 0;

  function follow(lastSeq) {
    lastReceived = lastSeq;
    if (!window.SharedWorker) {
      followOwn();
      return;
    }
    const runId = Number(page.dataset.runId);
    const worker = new SharedWorker(page.dataset.liveWorkerUrl, {name: "rlweb-live"});
    let ownStream = null;
    const leave = () => worker.port.postMessage({leave: runId});
    worker.port.onmessage = (message) => {
      const {mode, event, open, end, reset} = message.data;
      if (mode) page.dataset.following = mode;  // for tests and benchmarks
      if (mode === "own") ownStream = followOwn(leave);
      else if (mode === "shared") worker.port.postMessage({follow: runId, after: lastReceived});
      else if (event) receive(event, performance.now());
      else if (open !== undefined) liveIndicator.hidden = !open;
      else if (end) stop(end.status);
      else if (reset) restart();
    };
    worker.port.start();
    const ask = () => worker.port.postMessage({url: page.dataset.runsStreamUrl, ask: runId});
    ask();
    // a page left (or kept in the back-forward cache) stops following; one shown again goes on from where it was
    window.addEventListener("pagehide", () => {
      if (ownStream) ownStream.close();
      ownStream = null;
      leave();
    });
    window.addEventListener("pageshow", (shown) => {
      if (shown.persisted && !ended) ask();
    });
  }

  // A stream of the page's own, from the last event it has; `done` is called once the stream ends. After a dropped
  // connection the browser reconnects by itself (with Last-Event-ID), but after an HTTP error (a server restarting,
  // a proxy's 502, a database busy for a moment) it gives up for good: then the page opens the stream again, from
  // the last event it has, after 2 s, doubling up to a minute. Returns {close}.
  function followOwn(done = () => {}) {
    let source = null;
    let closed = false;
    let failures = 0;
    let retry = null;
    const close = () => {
      closed = true;
      clearTimeout(retry);
      if (source) source.close();
    };
    const open = () => {
      const current = new EventSource(`${page.dataset.streamUrl}?last_id=${lastReceived}`);
      source = current;
      current.onopen = () => {
        failures = 0;
        liveIndicator.hidden = false;
      };
      current.onmessage = (message) => receive(JSON.parse(message.data), performance.now());
      current.onerror = () => {
        liveIndicator.hidden = true;
        if (closed || current.readyState !== EventSource.CLOSED) return;
        failures += 1;
        retry = setTimeout(open, window.rlwebRetryDelay(failures));
      };
      current.addEventListener("reset", () => {
        close();
        done();
        restart();
      });
      current.addEventListener("end", (message) => {
        close();
        done();
        stop(JSON.parse(message.data).status);
      });
    };
    open();
    return {close};
  }

  // The page drew events of an attempt that a resume forgot (its worker died): draw the history again.
  function restart() {
    window.location.reload();
  }

  function stop(status) {
    setTimeout(() => {
      setStatus(status);
      endLive();
    }, 200);
  }

  function listenToControls() {
    const smoothing = document.getElementById("smoothing");
    smoothing.addEventListener("input", () => {
      controls.smoothing = Number(smoothing.value);
      document.getElementById("smoothing-value").textContent = controls.smoothing.toFixed(2);
      drawAll();
    });
    document.getElementById("x-axis").addEventListener("change", (change) => {
      controls.xAxis = change.target.value;
      drawAll();
    });
    document.getElementById("log-y").addEventListener("change", (change) => {
      controls.logY = change.target.checked;
      drawAll();
    });
  }

  async function start() {
    controls.smoothing = Number(document.getElementById("smoothing").value);
    controls.xAxis = document.getElementById("x-axis").value;
    controls.logY = document.getElementById("log-y").checked;
    listenToControls();
    const response = await fetch(page.dataset.historyUrl, {headers: {Accept: "application/json"}});
    if (!response.ok) {
      showError(`Could not load the run's history (HTTP ${response.status}).`);
      return;
    }
    const history = await response.json();
    loadSeries(history.metrics);
    marks.push(...history.changes);
    history.log.forEach(addLogLine);
    history.log.forEach(showNumbers);
    showNumbers({kind: "", values: {}});
    showCheckpoints(history.checkpoints);
    setProgress(history.run.steps_done);
    setStatus(history.run.status);
    if (history.run.error) showError(history.run.error);
    await drawAll();
    page.dataset.drawnSeq = history.last_seq;
    page.dataset.ready = "1";
    performance.mark("run-page-drawn");
    if (!history.run.finished) follow(history.last_seq);
  }

  // --- changing hyperparameters while it trains -----------------------------------------------------

  // The form posts in the background (the charts stay as they are): errors go next to their fields; the
  // change itself shows when the worker reports it (a log line and a mark on every chart).
  function listenToChangeForm() {
    const form = document.getElementById("live-change-form");
    if (!form) return;
    const status = document.getElementById("live-change-status");
    const formErrors = document.getElementById("live-change-errors");
    function showErrors(errors) {
      form.querySelectorAll(".field").forEach((field) => {
        const messages = errors[field.dataset.param] || [];
        const list = field.querySelector(".errorlist");
        list.replaceChildren(...messages.map((message) => Object.assign(document.createElement("li"), {textContent: message})));
        list.hidden = !messages.length;
        field.classList.toggle("field-error", messages.length > 0);
      });
      const general = [...(errors[""] || []), ...(errors.error ? [errors.error] : [])];
      formErrors.replaceChildren(...general.map((message) => Object.assign(document.createElement("li"), {textContent: message})));
      formErrors.hidden = !general.length;
    }
    form.addEventListener("submit", async (submit) => {
      submit.preventDefault();
      status.textContent = "sending…";
      const response = await fetch(form.action, {method: "POST", body: new FormData(form),
                                                 headers: {Accept: "application/json"}});
      const answer = await response.json().catch(() => ({error: `HTTP ${response.status}`}));
      showErrors(answer.errors || (answer.error ? {error: answer.error} : {}));
      status.textContent = response.ok ? "sent: the worker applies it within a second" : "";
    });
  }

  // --- jobs on checkpoints ---------------------------------------------------------------------------

  // The form posts in the background; the job list is fetched again every 2 s while a job is unfinished. A job's
  // Cancel button posts in the background too (the list can be replaced by a fetch, so its section listens).
  // Only the answer to the latest fetch counts (an older one that comes later would bring back cancelled jobs
  // as queued), and the list is replaced only when it changed: a click never lands on a list just taken away.
  function listenToJobForm() {
    const form = document.getElementById("checkpoint-job-form");
    const status = document.getElementById("checkpoint-job-status");
    let polling = null;
    let latestFetch = 0;
    // what a user reads in the list (each answer's CSRF tokens differ, so not its HTML)
    const jobSignature = (list) => `${list.dataset.unfinished} ${list.textContent.replace(/\s+/g, " ")}`;
    async function refreshJobs() {
      const thisFetch = ++latestFetch;
      clearTimeout(polling);
      const response = await fetch(page.dataset.jobsUrl, {headers: {Accept: "text/html"}}).catch(() => null);
      if (thisFetch !== latestFetch) return;
      if (!response || !response.ok) {
        polling = setTimeout(refreshJobs, 2000);
        return;
      }
      const holder = document.createElement("div");
      holder.innerHTML = await response.text();
      if (thisFetch !== latestFetch) return;
      const jobs = holder.querySelector("#checkpoint-jobs");
      const shown = document.getElementById("checkpoint-jobs");
      if (jobSignature(jobs) !== jobSignature(shown)) shown.replaceWith(jobs);
      polling = jobs.dataset.unfinished === "1" ? setTimeout(refreshJobs, 2000) : null;
    }
    function showErrors(errors) {
      for (const [id, names] of [["checkpoint-job-errors", [""]],
                                 ["checkpoint-job-field-errors", ["checkpoint", "kind", "episodes"]]]) {
        const messages = names.flatMap((name) => (errors[name] || []).map((text) => name ? `${name}: ${text}` : text));
        const list = document.getElementById(id);
        list.replaceChildren(...messages.map((text) => Object.assign(document.createElement("li"), {textContent: text})));
        list.hidden = !messages.length;
      }
    }
    const episodes = document.getElementById("id_episodes");
    const kind = document.getElementById("id_kind");
    const showEpisodes = () => { episodes.disabled = kind.value !== "evaluate"; };
    kind.addEventListener("change", showEpisodes);
    showEpisodes();
    form.addEventListener("submit", async (submit) => {
      submit.preventDefault();
      status.textContent = "sending…";
      const response = await fetch(form.action, {method: "POST", body: new FormData(form),
                                                 headers: {Accept: "application/json"}});
      const answer = await response.json().catch(() => ({errors: {"": [`HTTP ${response.status}`]}}));
      showErrors(answer.errors || {});
      status.textContent = response.ok ? "asked: a worker of the run's queue does it" : "";
      if (response.ok) refreshJobs();
    });
    form.parentElement.addEventListener("submit", async (submit) => {
      if (!submit.target.matches("form.job-cancel")) return;
      submit.preventDefault();
      submit.target.querySelector("button").disabled = true;
      const response = await fetch(submit.target.action, {method: "POST", body: new FormData(submit.target),
                                                          headers: {Accept: "application/json"}});
      if (!response.ok) {
        status.textContent = `could not cancel: HTTP ${response.status}`;
        submit.target.querySelector("button").disabled = false;
      }
      refreshJobs();
    });
    if (document.getElementById("checkpoint-jobs").dataset.unfinished === "1") polling = setTimeout(refreshJobs, 2000);
  }

  listenToChangeForm();
  listenToJobForm();
  start();
})();
