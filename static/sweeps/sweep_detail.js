// The sweep page: the trials table and the best so far from /sweeps/N/data.json, polled every 3 s while the
// sweep runs (the page only reads: the workers and a periodic chore advance the sweep); the figures from
// /sweeps/N/figures.json, fetched again when a trial ends or evaluates (the data's `version` changes).
import {element, follow, number} from "./sweep_page.js";

const tableBody = document.querySelector("#trial-table tbody");
const searched = [...document.querySelectorAll("#trial-table thead th")].slice(2, -3).map((th) => th.textContent);
const charts = ["curves", "history", "parallel", "importances", "slices"];

function param(value) {  // a sampled float to 4 significant digits; whole numbers and choices as they are
  if (value === undefined) return "–";
  return typeof value === "number" && !Number.isInteger(value) ? String(Number(value.toPrecision(4))) : String(value);
}

function show(data) {  // after the status (sweep_page.js)
  const counts = {running: 0, complete: 0, pruned: 0, failed: 0};
  data.trials.forEach((trial) => { counts[trial.state] += 1; });
  document.getElementById("sweep-progress").textContent =
    `${data.finished} of ${data.trials_total} trials ended: ${counts.complete} complete, ${counts.pruned} pruned, ` +
    `${counts.failed} failed; ${data.training} training, ${data.queued} waiting for a worker. ` +
    `${data.steps.toLocaleString()} env steps so far.`;
  const best = document.getElementById("best");
  if (data.best) {
    const params = Object.entries(data.best.params).map(([name, value]) => `${name}=${param(value)}`).join(", ");
    document.getElementById("best-text").textContent = `trial ${data.best.number}, value ${number(data.best.value, 3)} (${params})`;
    best.hidden = false;
  }
  const compare = document.getElementById("compare-trials");
  if (data.compare_url) { compare.href = data.compare_url; compare.hidden = false; }
  document.getElementById("trials-empty").hidden = data.trials.length > 0;
  tableBody.replaceChildren(...data.trials.map((trial) => row(trial, data.best)));
}

function row(trial, best) {
  const tr = element("tr", null, {"data-trial": trial.number, "data-state": trial.state});
  if (best && best.number === trial.number) tr.className = "best-row";
  const name = element("td");
  name.append(trial.experiment_url ? element("a", `trial ${trial.number}`, {href: trial.experiment_url}) : `trial ${trial.number}`);
  const state = element("td");
  state.append(element("span", trial.state, {class: `state state-${trial.state}`}));
  if (trial.reason) state.append(element("span", trial.reason, {class: "reason"}));
  const cells = [name, state, ...searched.map((name) => element("td", param(trial.params[name])))];
  cells.push(element("td", number(trial.value, 3), {class: "number"}));
  cells.push(element("td", trial.steps.toLocaleString(), {class: "number"}));
  const runs = element("td");
  trial.runs.forEach((run, index) => {
    if (index) runs.append(" ");
    runs.append(element("a", `run ${run.id}`, {href: run.url, title: `seed ${run.seed}: ${run.status}, ${run.steps_done} of ${run.total_steps} steps`}));
  });
  cells.push(runs);
  tr.append(...cells);
  return tr;
}

follow(charts, show);
