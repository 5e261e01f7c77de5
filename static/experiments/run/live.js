// The run page following its run: live events (over a stream of its own, or through the shared worker) go into
// the charts and the rest of the page at once, and the charts are drawn at the next animation frame.
// Every event has a sequence number `seq`. The history says up to which seq each metric holds
// (`through_seq`) and where the stream picks up (`last_seq`), so no point is lost or drawn twice, also
// after the browser reconnects (it sends Last-Event-ID).
import {addMark, addPoints, dueCharts, drawCharts, endCharts, ended} from "./charts.js";
import {endsAnEpisode} from "../lib/episodes.js";
import {addCheckpoint, addLogLine, addVideo, countEpisode, refreshEnvironment, setProgress, setStatus, showEnd,
        showError, showNumbers} from "./details.js";
import {retryDelay} from "../lib/retry.js";

const page = document.getElementById("run-page");
const liveIndicator = document.getElementById("live-indicator");
const metricKinds = ["episode", "train", "eval", "time"];
const logKinds = ["started", "resumed", "checkpoint", "video", "eval", "hyperparameters", "finished", "failed"];
const maxUnreported = 10_000;  // seqs kept for the "drawn" report while the tab is hidden (no frames)

function isNumber(value) {
  return typeof value === "number" && Number.isFinite(value);
}

function apply(events) {
  const changed = new Set();
  for (const event of events) {
    setProgress(event.step);
    if (metricKinds.includes(event.kind)) addPoints(event, changed);
    if (metricKinds.includes(event.kind) && endsAnEpisode(event)) countEpisode(event);
    if (logKinds.includes(event.kind)) addLogLine(event);
    if (event.kind === "started") {
      setStatus("running");
      const deviceUsed = document.getElementById("device-used");  // a logged run's page has none
      if (event.values.device && deviceUsed) deviceUsed.textContent = event.values.device;
    }
    if (event.kind === "started" || event.kind === "resumed") refreshEnvironment();
    else if (event.kind === "checkpoint") addCheckpoint(event.values);
    else if (event.kind === "video") addVideo(event.values);
    else if (event.kind === "hyperparameters" && !event.values.error) addMark(event, changed);
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
  endCharts();
  if (frame === null) frame = requestAnimationFrame(onFrame);
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
  const due = dueCharts();
  if (!unreported.length && !due.length) {
    frame = null;
    return;
  }
  const batch = unreported;
  unreported = [];
  const drawStart = performance.now();
  frame = drawCharts(due).then(() => {
    drawnBatch = batch.length ? {batch, drawStart, drawEnd: performance.now()} : null;
    frame = requestAnimationFrame(onFrame);
  });
}

// Follow the run from `lastSeq` on. A browser opens at most 6 connections to a site: with a stream per page, a
// seventh run page (and every other page of the site) would wait for one. So the first two run pages open follow
// their runs over streams of their own, the fastest path, and the others through the shared worker that holds one
// stream for all of them (live_worker.js: one process hop more). Without shared workers, every page has its own.
let lastReceived = 0;

export function follow(lastSeq) {
  lastReceived = lastSeq;
  if (!window.SharedWorker) {
    followOwn();
    return;
  }
  const runId = Number(page.dataset.runId);
  // A module worker (it imports lib/retry.js). Pages asking for a worker of the same URL and name but another type
  // get an error instead of a port: the name differs from the one the classic worker had, for tabs opened before.
  const worker = new SharedWorker(page.dataset.liveWorkerUrl, {name: "rlweb-live-module", type: "module"});
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
      retry = setTimeout(open, retryDelay(failures));
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
