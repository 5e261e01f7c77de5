// How long to wait before opening a live stream again after its `failures`-th HTTP error in a row (the browser
// gives up on an EventSource after one): 2 s, doubling up to a minute. The run page, the compare page and the
// shared worker (live_worker.js, a module worker) all wait this long.

export function retryDelay(failures) {
  return Math.min(2000 * 2 ** (failures - 1), 60_000);
}
