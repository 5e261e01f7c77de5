// One live connection for the run pages of the site open in this browser (a SharedWorker, started by
// run/live.js). A browser opens at most 6 HTTP/1.1 connections to a site: with a server-sent-events stream per
// page, a seventh run page would wait for a connection, and so would every other request of the site (pages,
// history, downloads). So each run page asks this worker first: the first `maxOwnStreams` open follow their runs
// over streams of their own (the fastest path: an event reaches the page without passing through this worker's
// process), and the others ask the worker to follow their runs, which it does for all of them over one stream
// (runs-stream: ?runs=RUN:SEQ,...), handing each event to the pages of its run.
//
// Each page says from which seq it needs its run's events (what its history holds). A run's stream position is
// the smallest of its pages' seqs; the worker opens the stream again when that moves back (a new page behind the
// others) or the set of runs changes, and after the connection drops, from where each run is: no event is lost,
// and none reaches a page twice.
//
// A module worker (run/live.js starts it with type "module"): it imports the wait before opening a refused stream
// again from lib/retry.js, as the pages do.
import {retryDelay} from "./lib/retry.js";

const maxOwnStreams = 2;  // leaves the browser 3 of its 6 connections for the rest of the site
const ownStreams = new Set();  // the ports of the pages that follow their run over a stream of their own
const runs = new Map();  // run id -> Map(port -> the last seq that page has)
let streamUrl = null;
let source = null;
let open = false;
let reopenTimer = null;
let failures = 0;  // in a row: the wait before the next try doubles, from 2 s up to a minute (retryDelay)
let openedAt = -Infinity;  // when the stream was last opened: at most once a second, as pages come one by one

function position(pages) {
  return Math.min(...pages.values());
}

function post(port, message) {
  try {
    port.postMessage(message);
  } catch (error) {
    // a page that went away without saying so: forgotten at its run's end
  }
}

function reopen(delay) {
  clearTimeout(reopenTimer);
  reopenTimer = setTimeout(connect, delay);
}

function connect() {
  reopenTimer = null;
  if (source) source.close();
  source = null;
  setOpen(false);
  if (!runs.size || !streamUrl) return;
  const followed = [...runs].map(([run, pages]) => `${run}:${position(pages)}`).join(",");
  openedAt = performance.now();
  const current = new EventSource(`${streamUrl}?runs=${followed}`);
  source = current;
  current.onopen = () => {
    failures = 0;
    setOpen(true);
  };
  current.onmessage = (message) => {
    const event = JSON.parse(message.data);
    const pages = runs.get(event.run);
    if (!pages) return;
    delete event.run;
    for (const [port, seq] of pages) {
      if (event.seq <= seq) continue;  // that page has it (it started ahead, or the stream opened again)
      pages.set(port, event.seq);
      post(port, {event});
    }
  };
  for (const kind of ["end", "reset"]) {
    current.addEventListener(kind, (message) => {
      const data = JSON.parse(message.data);
      const pages = runs.get(data.run);
      if (!pages) return;
      runs.delete(data.run);  // the stream no longer follows it either
      pages.forEach((seq, port) => post(port, {[kind]: data}));
      if (!runs.size) connect();  // nothing left to follow: close
    });
  }
  // the server closed the stream, refused it (signed out) or the network failed: open it again, from where each
  // run is, rather than from where this stream began (as the browser would)
  current.onerror = () => {
    if (source !== current) return;
    current.close();
    setOpen(false);
    failures += 1;
    reopen(retryDelay(failures));
  };
}

function setOpen(state) {
  open = state;
  runs.forEach((pages) => pages.forEach((seq, port) => post(port, {open})));
}

function follow(port, run, after) {
  let pages = runs.get(run);
  const streamed = pages ? position(pages) : null;
  if (!pages) {
    pages = new Map();
    runs.set(run, pages);
  }
  pages.set(port, after);
  // a new run, or a page behind the stream: pages that come together (a browser restoring its tabs) open it once.
  // Until then the page is not live: the open stream does not carry its run (or not from where it is).
  const behind = streamed === null || after < streamed;
  post(port, {open: open && !behind});
  if (behind) reopen(Math.max(30, openedAt + 1000 - performance.now()));
}

function unfollow(port, run) {
  const pages = runs.get(run);
  if (!pages) return;
  pages.delete(port);
  if (!pages.size) {
    runs.delete(run);
    reopen(1000);  // without it, unless another page comes meanwhile
  }
}

self.onconnect = (connection) => {
  const port = connection.ports[0];
  port.onmessage = (message) => {
    const {url, ask, follow: run, after, leave} = message.data;
    if (url) streamUrl = url;
    if (ask !== undefined) {
      const own = ownStreams.size < maxOwnStreams;
      if (own) ownStreams.add(port);
      post(port, {mode: own ? "own" : "shared"});
    }
    if (run !== undefined) follow(port, run, after);
    if (leave !== undefined) {
      ownStreams.delete(port);
      unfollow(port, leave);
    }
  };
  port.start();
};
