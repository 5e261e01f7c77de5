// The run page's "Duration": how long the run has trained over its attempts, as run_views.duration_text writes
// it, and a clock that counts it on while the run runs (the page is drawn with the seconds so far).

export function durationText(seconds, attempts) {
  const text = seconds < 60 ? `${seconds.toFixed(1)} s`
    : seconds < 3600 ? `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`
      : `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
  return attempts > 1 ? `${text} over ${attempts} attempts` : text;
}

// Calls `show` with "running for ..." now and every second, from `seconds` at the time of the call
// (`now` in milliseconds, performance.now by default); returns the function that stops it.
export function durationClock(show, seconds, attempts, now = () => performance.now()) {
  const start = now();
  const tick = () => show(`running for ${durationText(seconds + (now() - start) / 1000, attempts)}`);
  tick();
  const timer = setInterval(tick, 1000);
  return () => clearInterval(timer);
}
