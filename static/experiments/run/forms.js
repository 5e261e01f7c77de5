// The run page's two forms that post in the background: changing hyperparameters while the run trains, and
// jobs on its checkpoints (evaluate, record a video), with the job list kept up to date.

const page = document.getElementById("run-page");

// --- changing hyperparameters while it trains -----------------------------------------------------

// The form posts in the background (the charts stay as they are): errors go next to their fields; the
// change itself shows when the worker reports it (a log line and a mark on every chart).
export function listenToChangeForm() {
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
export function listenToJobForm() {
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
    status.textContent = response.ok ? "asked: a worker does it" : "";
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
