// The run page: draw the stored history, then follow the live stream and append points as they come.
// Every event has a sequence number `seq`; the stream resumes after the last one drawn, so no point
// is lost or drawn twice, also after the browser reconnects (it sends Last-Event-ID).
(function () {
  "use strict";

  const page = document.getElementById("run-page");
  const statusLabel = document.getElementById("run-status");
  const progress = document.getElementById("run-progress");
  const progressText = document.getElementById("run-progress-text");
  const liveIndicator = document.getElementById("live-indicator");
  const returnChart = document.getElementById("chart-episode-return");
  const lossChart = document.getElementById("chart-train-loss");
  const totalSteps = Number(page.dataset.totalSteps);
  const finishedStatuses = ["succeeded", "failed", "cancelled", "lost"];
  const movingAverageWindow = 20;
  const drawDelayMilliseconds = 250;

  let stepsDone = Number(progress.value);
  let episodeCount = 0;
  let recentReturns = [];
  let pending = [];
  let drawTimer = null;
  const evaluations = {x: [], y: [], error: []};

  const plotConfig = {responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"]};

  function layout(yTitle) {
    return {
      margin: {l: 56, r: 16, t: 8, b: 44},
      xaxis: {title: {text: "env steps"}, rangemode: "tozero", gridcolor: "#e7eaf0", zeroline: false},
      yaxis: {title: {text: yTitle}, gridcolor: "#e7eaf0", zeroline: false},
      legend: {orientation: "h", x: 0, y: 1.02, yanchor: "bottom"},
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: {family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 12, color: "#2b3040"},
      hovermode: "x unified",
    };
  }

  function drawEmptyCharts() {
    Plotly.newPlot(returnChart, [
      {name: "episode return", x: [], y: [], mode: "markers", type: "scatter",
       marker: {size: 4, color: "rgba(59, 110, 214, 0.45)"}},
      {name: "eval return (mean ± std)", x: [], y: [], mode: "lines+markers", type: "scatter",
       line: {color: "#d9534f", width: 2}, marker: {size: 7},
       error_y: {type: "data", array: [], visible: true, color: "rgba(217, 83, 79, 0.5)"}},
      {name: `moving average (${movingAverageWindow} episodes)`, x: [], y: [], mode: "lines", type: "scatter",
       line: {color: "#1f3f8a", width: 2}},
    ], layout("return"), plotConfig);
    Plotly.newPlot(lossChart, [
      {name: "train/loss", x: [], y: [], mode: "lines", type: "scatter", line: {color: "#6c4bb4", width: 1.5}},
    ], layout("loss"), plotConfig);
  }

  function setStatus(status) {
    statusLabel.textContent = status;
    statusLabel.className = "status status-" + status;
    page.dataset.status = status;
    if (finishedStatuses.includes(status)) {
      const cancelForm = document.getElementById("cancel-form");
      if (cancelForm) cancelForm.remove();
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

  function checkpointItem(id, tag, step, url) {
    const item = document.createElement("li");
    item.dataset.checkpointId = id;
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

  // The checkpoints the run has now (from the history endpoint): replaces the list.
  function showCheckpoints(checkpoints) {
    const list = document.getElementById("checkpoint-list");
    list.replaceChildren(...checkpoints.map((c) => checkpointItem(c.id, c.tag, c.step, c.url)));
    document.getElementById("checkpoint-empty").hidden = checkpoints.length > 0;
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
  }

  // Turn a batch of events into chart points and page updates.
  function apply(events, live) {
    const episodes = {x: [], y: []};
    const averages = {x: [], y: []};
    const losses = {x: [], y: []};
    let evaluated = false;
    for (const event of events) {
      const values = event.values;
      setProgress(event.step);
      if (event.kind === "started") {
        setStatus("running");
      } else if (event.kind === "episode") {
        const episodeReturn = values["rollout/episode_return"];
        episodes.x.push(event.step);
        episodes.y.push(episodeReturn);
        recentReturns.push(episodeReturn);
        if (recentReturns.length > movingAverageWindow) recentReturns.shift();
        averages.x.push(event.step);
        averages.y.push(recentReturns.reduce((sum, value) => sum + value, 0) / recentReturns.length);
        episodeCount += 1;
      } else if (event.kind === "eval") {
        evaluations.x.push(event.step);
        evaluations.y.push(values["eval/return_mean"]);
        evaluations.error.push(values["eval/return_std"]);
        evaluated = true;
      } else if (event.kind === "train" && values["train/loss"] !== undefined) {
        losses.x.push(event.step);
        losses.y.push(values["train/loss"]);
      } else if (event.kind === "time") {
        document.getElementById("steps-per-second").textContent = Math.round(values["time/steps_per_second"]);
      } else if (event.kind === "checkpoint" && live) {
        addCheckpoint(values);
      } else if (event.kind === "finished") {
        setStatus(values.status);
      } else if (event.kind === "failed") {
        setStatus("failed");
        showError(values.error);
      }
    }
    if (episodes.x.length) {
      Plotly.extendTraces(returnChart, {x: [episodes.x, averages.x], y: [episodes.y, averages.y]}, [0, 2]);
      document.getElementById("episode-count").textContent = episodeCount;
    }
    if (evaluated) {
      Plotly.restyle(returnChart, {x: [evaluations.x], y: [evaluations.y], "error_y.array": [evaluations.error]}, [1]);
      const last = evaluations.y.length - 1;
      document.getElementById("eval-return").textContent =
        `${evaluations.y[last].toFixed(1)} ± ${evaluations.error[last].toFixed(1)}`;
      document.getElementById("best-eval-return").textContent = Math.max(...evaluations.y).toFixed(1);
    }
    if (losses.x.length) {
      Plotly.extendTraces(lossChart, {x: [losses.x], y: [losses.y]}, [0]);
    }
  }

  // Live events arrive one by one; draw them in small batches.
  function queue(event) {
    pending.push(event);
    if (drawTimer === null) {
      drawTimer = setTimeout(() => {
        drawTimer = null;
        const batch = pending;
        pending = [];
        apply(batch, true);
      }, drawDelayMilliseconds);
    }
  }

  function follow(lastSeq) {
    const source = new EventSource(`${page.dataset.streamUrl}?last_id=${lastSeq}`);
    source.onopen = () => { liveIndicator.hidden = false; };
    source.onmessage = (message) => queue(JSON.parse(message.data));
    source.onerror = () => { liveIndicator.hidden = true; };  // the browser reconnects with Last-Event-ID
    source.addEventListener("end", (message) => {
      source.close();
      const status = JSON.parse(message.data).status;
      setTimeout(() => setStatus(status), drawDelayMilliseconds * 2);
    });
  }

  async function start() {
    drawEmptyCharts();
    const response = await fetch(page.dataset.eventsUrl, {headers: {Accept: "application/json"}});
    if (!response.ok) {
      showError(`Could not load the run's history (HTTP ${response.status}).`);
      return;
    }
    const history = await response.json();
    apply(history.events, false);
    showCheckpoints(history.checkpoints);
    setProgress(history.run.steps_done);
    setStatus(history.run.status);
    if (history.run.error) showError(history.run.error);
    if (!history.run.finished) follow(history.last_seq);
  }

  start();
})();
