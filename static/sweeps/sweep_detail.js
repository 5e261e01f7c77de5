// The sweep page: the trials table and the best so far from /sweeps/N/data.json, polled every 3 s while the
// sweep runs (the poll also advances it); the figures from /sweeps/N/figures.json, fetched again when a trial
// ends or evaluates (the data's `version` changes).
const urls = document.getElementById("sweep-urls").dataset;
const tableBody = document.querySelector("#trial-table tbody");
const searched = [...document.querySelectorAll("#trial-table thead th")].slice(2, -3).map((th) => th.textContent);
const charts = ["curves", "history", "parallel", "importances", "slices"];
let figuresVersion = null;

function element(tag, text, attributes = {}) {
  const made = document.createElement(tag);
  if (text !== undefined && text !== null) made.textContent = text;
  for (const [name, value] of Object.entries(attributes)) made.setAttribute(name, value);
  return made;
}

function number(value, digits = 2) {
  return typeof value === "number" && Number.isFinite(value) ? value.toFixed(digits) : "–";
}

function param(value) {  // a sampled float to 4 significant digits; whole numbers and choices as they are
  if (value === undefined) return "–";
  return typeof value === "number" && !Number.isInteger(value) ? String(Number(value.toPrecision(4))) : String(value);
}

function show(data) {
  const status = document.getElementById("sweep-status");
  status.textContent = data.status;
  status.className = `status status-${data.status}`;
  const cancel = document.getElementById("cancel-form");
  if (cancel && data.status !== "running") cancel.remove();
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

async function drawFigures() {
  const response = await fetch(urls.figures, {headers: {Accept: "application/json"}});
  if (!response.ok) return;
  const figures = await response.json();
  for (const name of charts) {
    const target = document.getElementById(`chart-${name}`);
    const figure = figures[name];
    if (!figure || figure.message) {
      if (target.dataset.drawn) Plotly.purge(target);
      target.dataset.drawn = "";
      target.replaceChildren(element("p", figure ? figure.message : "", {class: "chart-message"}));
      continue;
    }
    if (!target.dataset.drawn) target.replaceChildren();
    await Plotly.react(target, figure.data, figure.layout, {responsive: true, displaylogo: false});
    target.dataset.drawn = "1";
  }
  document.body.dataset.figuresDrawn = figuresVersion;
}

async function update(data) {
  show(data);
  if (data.version !== figuresVersion) {
    figuresVersion = data.version;
    await drawFigures();
  }
  return data.status === "running";
}

async function poll() {
  try {
    const response = await fetch(urls.data, {headers: {Accept: "application/json"}});
    if (response.ok && !(await update(await response.json()))) return;
  } catch (error) {
    // the server is restarting: try again at the next tick
  }
  setTimeout(poll, 3000);
}

const first = JSON.parse(document.getElementById("sweep-data").textContent);
update(first).then((running) => { if (running) setTimeout(poll, 3000); });
