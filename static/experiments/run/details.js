// The run page beside its charts: status, progress, the numbers at the top, the checkpoints, the videos and the
// log, from the history and then from live events (run/live.js); and what a click on a chart points at.
import {durationClock, durationText} from "../lib/duration.js";
import {bestEpisodeReturnInHistory, episodeReturn, episodesInHistory} from "../lib/episodes.js";
import {drawnNow} from "../drawn_now.js";

const page = document.getElementById("run-page");
const statusLabel = document.getElementById("run-status");
const progress = document.getElementById("run-progress");
const progressText = document.getElementById("run-progress-text");
const liveIndicator = document.getElementById("live-indicator");
const logList = document.getElementById("log-list");
let totalSteps = Number(page.dataset.totalSteps);  // a logged run's grows with its steps when its script planned none
// The run's duration counts every attempt. The one this page sees end is counted in `data-attempts`
// unless the page was drawn before a worker claimed it; earlier attempts' seconds do not change meanwhile.
const earlierSeconds = Number(page.dataset.earlierSeconds);
const attempts = Number(page.dataset.attempts) + (page.dataset.status === "queued" ? 1 : 0);
export const finishedStatuses = ["succeeded", "failed", "cancelled", "lost", "pruned"];
const maxLogLines = 500;
let stopDurationClock = null;  // while the run runs, "running for ..." counts on every second

let stepsDone = Number(progress.value);
let episodeCount = 0;
let bestEval = null;
let lastEpisode = null;  // a logged run's page shows its training episodes' returns instead of evaluations'
let bestEpisode = null;

function isNumber(value) {
  return typeof value === "number" && Number.isFinite(value);
}

// The numbers the history gives: the episodes so far, the best evaluation (or the latest and best episode
// returns), the latest speed.
export function loadNumbers(metrics, lastEpisodeReturn = null) {
  episodeCount = episodesInHistory(metrics);
  lastEpisode = lastEpisodeReturn;
  bestEpisode = bestEpisodeReturnInHistory(metrics);
  const evals = metrics["eval/return_mean"];
  if (evals && evals.value.length) bestEval = Math.max(...evals.value);
  const speed = metrics["time/steps_per_second"];
  if (speed && speed.value.length && !finishedStatuses.includes(page.dataset.status)) {  // else: the average
    document.getElementById("steps-per-second").textContent = Math.round(speed.value[speed.value.length - 1]);
  }
}

export function countEpisode(event) {
  episodeCount += 1;
  lastEpisode = episodeReturn(event);
  bestEpisode = bestEpisode === null ? lastEpisode : Math.max(bestEpisode, lastEpisode);
}

export function changeText(values) {
  return Object.entries(values.changes || {}).map(([name, change]) => `${name} ${change.old} → ${change.new}`).join(", ");
}

// --- a clicked point: the video and the checkpoint nearest to its step ------------------------------

function nearestTo(step, items) {
  const distance = (item) => Math.abs(Number(item.dataset.step) - step);
  return items.reduce((best, item) => (best === null || distance(item) < distance(best) ? item : best), null);
}

export function showNearest(step) {
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

// --- status, numbers, checkpoints, videos, log ---------------------------------------------------

export function setStatus(status) {
  statusLabel.textContent = status;
  statusLabel.className = "status status-" + status;
  page.dataset.status = status;
  if (status === "running" && !stopDurationClock) {  // from the seconds the page was drawn with, or its start
    const seconds = page.dataset.runningSeconds ? Number(page.dataset.runningSeconds) : earlierSeconds;
    delete page.dataset.runningSeconds;
    const duration = document.getElementById("run-duration");
    stopDurationClock = durationClock((text) => { duration.textContent = text; }, seconds, attempts);
  } else if (status !== "running" && stopDurationClock) {
    stopDurationClock();
    stopDurationClock = null;
  }
  if (finishedStatuses.includes(status)) {
    const cancelForm = document.getElementById("cancel-form");
    if (cancelForm) cancelForm.remove();
    const changeCard = document.getElementById("live-change");
    if (changeCard) changeCard.remove();
    liveIndicator.hidden = true;
  }
}

export function setProgress(steps) {
  stepsDone = Math.max(stepsDone, steps);
  totalSteps = Math.max(totalSteps, stepsDone);
  progress.max = totalSteps;
  progress.value = stepsDone;
  progressText.textContent = `${stepsDone} / ${totalSteps} steps`;
}

export function showError(message) {
  document.getElementById("run-error-text").textContent = message;
  document.getElementById("run-error").hidden = false;
}

export function showNumbers(event) {
  const values = event.values;
  if (event.kind === "eval" && isNumber(values["eval/return_mean"])) {
    const spread = isNumber(values["eval/return_std"]) ? ` ± ${values["eval/return_std"].toFixed(1)}` : "";
    const evalReturn = document.getElementById("eval-return");  // a logged run's page has none
    if (evalReturn) evalReturn.textContent = values["eval/return_mean"].toFixed(1) + spread;
    bestEval = bestEval === null ? values["eval/return_mean"] : Math.max(bestEval, values["eval/return_mean"]);
  }
  if (event.kind === "time" && isNumber(values["time/steps_per_second"])) {
    document.getElementById("steps-per-second").textContent = Math.round(values["time/steps_per_second"]);
  }
  if (bestEval !== null && document.getElementById("best-eval-return")) {
    document.getElementById("best-eval-return").textContent = bestEval.toFixed(1);
  }
  if (document.getElementById("last-episode-return")) {
    document.getElementById("last-episode-return").textContent = isNumber(lastEpisode) ? lastEpisode.toFixed(1) : "–";
    document.getElementById("best-episode-return").textContent = isNumber(bestEpisode) ? bestEpisode.toFixed(1) : "–";
  }
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
export function showCheckpoints(checkpoints) {
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
export function addCheckpoint(values) {
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
export function addVideo(values) {
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

// The Environment card is drawn by the server: a worker records what made the run as it starts an attempt, just
// before the attempt's first event ("started" or "resumed"), so the card is drawn again from the page then.
export async function refreshEnvironment() {
  try {
    const card = await drawnNow("run-environment", window.location.pathname);
    if (card) document.getElementById("run-environment").replaceWith(card);
  } catch {
    // offline for now: the card stays as it was, and a reload draws it
  }
}

function logText(event) {
  const values = event.values;
  switch (event.kind) {
    case "started": {
      const notes = Array.isArray(values.notes) && values.notes.length ? ` · note: ${values.notes.join(" ")}` : "";
      return `started ${values.algorithm || ""} on ${values.env_id || ""} (${values.device || "?"}, seed ${values.seed})${notes}`;
    }
    case "resumed":  // a resumed attempt: why the one before ended, and where this one goes on from
      if (values.script) {  // a logged run's script started again (rlweb_client.init(resume=...))
        return `attempt ${values.attempt} ${values.interrupted === "running" ? "ended" : values.interrupted}: ` +
          `${values.reason}. Resumed by its script on ${values.script} from step ${values.from_step}` +
          (values.forgot_after ? "; what was logged after that step is forgotten" : "");
      }
      return `attempt ${values.attempt} ${values.interrupted}: ${values.reason} Resumed ` +
        (values.checkpoint ? `from the ${values.checkpoint} checkpoint at step ${values.from_step}` : "from scratch (no checkpoint)");
    case "checkpoint":
      return values.error ? `checkpoint ${values.tag || ""}: ${values.error}` : `checkpoint saved: ${values.tag}`;
    case "video":
      return values.error ? values.error
        : `video recorded${isNumber(values.episode_return) ? `: return ${values.episode_return.toFixed(1)}` : ""}`;
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

export function addLogLine(event) {
  const item = document.createElement("li");
  item.className = "log-" + event.kind + (event.kind !== "failed" && event.values.error ? " log-warning" : "");
  if (event.kind !== "failed" && event.values.error) showWarning(event);
  item.dataset.seq = event.seq;
  const where = document.createElement("span");
  where.className = "log-where";
  where.textContent = `step ${event.step} · ${event.time.toFixed(1)} s`;
  const text = document.createElement("span");
  text.className = "log-text";
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

// `attemptSeconds`: how long the attempt that ended trained (its `seconds`; event times are on the run's
// clock, which a resumed run carries on from its checkpoint).
export function showEnd(attemptSeconds) {
  document.getElementById("run-finished").textContent = "just now";
  const seconds = earlierSeconds + attemptSeconds;
  if (seconds > 0 && stepsDone > 0) {  // the average over the run, as the page shows a finished run's
    const speed = document.getElementById("steps-per-second");
    speed.textContent = Math.round(stepsDone / seconds);
    speed.title = "the average over the run";
  }
  if (stopDurationClock) stopDurationClock();
  stopDurationClock = null;
  document.getElementById("run-duration").textContent = durationText(seconds, attempts);
}
