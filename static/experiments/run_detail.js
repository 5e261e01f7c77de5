// The run page: draw the stored history (one chart per metric, downsampled on the server), then follow
// the live stream and add points, log lines, checkpoints and videos as they come. Its parts, as native modules
// (no build step): run/charts.js (the charts and their live tails), run/details.js (everything beside the charts),
// run/live.js (following the run), run/forms.js (the forms that post in the background); lib/ holds the pure
// parts, which tests/js tests under node.
import {controls, drawAll, loadMarks, loadSeries} from "./run/charts.js";
import {addLogLine, loadNumbers, setProgress, setStatus, showCheckpoints, showError, showNumbers} from "./run/details.js";
import {listenToChangeForm, listenToJobForm} from "./run/forms.js";
import {follow} from "./run/live.js";

const page = document.getElementById("run-page");

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
  loadNumbers(history.metrics, history.last_episode_return);
  loadMarks(history.changes);
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

listenToChangeForm();
listenToJobForm();
start();
