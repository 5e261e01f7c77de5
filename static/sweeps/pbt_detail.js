// The population page (population-based training): members, copies and the best member's schedule from
// /sweeps/N/data.json, polled every 3 s while the sweep runs; the figures (members' curves, lineage, settings over
// time) from /sweeps/N/figures.json, fetched again when the data's `version` changes.
import {element, follow, number} from "./sweep_page.js";

const charts = ["curves", "lineage", "schedules"];
const searched = [...document.querySelectorAll("#trial-table thead th")].slice(2, -3)
  .map((th) => th.textContent.replace(/ \(first\)$/, ""));

function param(value) {
  if (value === undefined || value === null) return "–";
  return typeof value === "number" && !Number.isInteger(value) ? String(Number(value.toPrecision(4))) : String(value);
}

function values(settings) {
  return Object.entries(settings).map(([name, value]) => `${name}=${param(value)}`).join(", ");
}

function show(data) {  // after the status (sweep_page.js)
  document.getElementById("sweep-progress").textContent =
    `${data.trials.length} members: ${data.training} training, ${data.waiting} waiting at a ready point, ` +
    `${data.queued} waiting for a worker, ${data.finished} ended. ${data.copies.length} ` +
    `cop${data.copies.length === 1 ? "y" : "ies"}; ${data.steps.toLocaleString()} env steps so far.`;
  if (data.best) {
    document.getElementById("best-text").textContent = `member ${data.best.number}, value ${number(data.best.value, 3)}`;
    document.getElementById("best-schedule").textContent =
      data.best.schedule.map(([step, settings]) => `from step ${step.toLocaleString()}: ${values(settings)}`).join("; ");
    document.getElementById("best").hidden = false;
  }
  document.querySelector("#trial-table tbody").replaceChildren(...data.trials.map((trial) => member(trial, data.best)));
  document.getElementById("copies-empty").hidden = data.copies.length > 0;
  document.querySelector("#copy-table tbody").replaceChildren(...data.copies.map(copy));
}

function member(trial, best) {
  const tr = element("tr", null, {"data-member": trial.number, "data-state": trial.state});
  if (best && best.number === trial.number) tr.className = "best-row";
  const name = element("td");
  name.append(trial.experiment_url ? element("a", `member ${trial.number}`, {href: trial.experiment_url}) : `member ${trial.number}`);
  const state = element("td");
  state.append(element("span", trial.state, {class: `state state-${trial.state}`}));
  if (trial.reason) state.append(element("span", trial.reason, {class: "reason"}));
  const runs = element("td");
  trial.runs.forEach((run) => runs.append(element("a", `run ${run.id}`, {href: run.url, title: `${run.status}, ${run.steps_done} of ${run.total_steps} steps`})));
  tr.append(name, state, ...searched.map((key) => element("td", param(trial.params[key]))),
    element("td", number(trial.value, 3), {class: "number"}), element("td", trial.steps.toLocaleString(), {class: "number"}), runs);
  return tr;
}

function copy(row) {
  const tr = element("tr", null, {"data-member": row.member, "data-donor": row.donor, "data-step": row.step});
  tr.append(element("td", row.step.toLocaleString(), {class: "number"}), element("td", `member ${row.member}`),
    element("td", `member ${row.donor}`), element("td", `${number(row.member_score)} → ${number(row.donor_score)}`, {class: "number"}),
    element("td", `${values(row.old)} → ${values(row.new)}`));
  return tr;
}

follow(charts, show);
