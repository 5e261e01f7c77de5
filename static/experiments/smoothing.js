// What the run page and the compare page share: TensorBoard's exponential moving average, debiased so the
// first points are not pulled towards 0; gaps (null, NaN) stay gaps and do not move the average.
// `rlwebSmoother(weight)` is the same average one value at a time (the run page's live points);
// `rlwebSmooth(values, weight)` smooths a whole series with it.
window.rlwebSmoother = function smoother(weight) {
  "use strict";
  let last = 0;
  let norm = 0;
  return function next(value) {
    if (value === null || !Number.isFinite(value)) return null;
    last = last * weight + (1 - weight) * value;
    norm = norm * weight + (1 - weight);
    return last / norm;
  };
};

window.rlwebSmooth = function smooth(values, weight) {
  "use strict";
  if (!weight) return values;
  return values.map(window.rlwebSmoother(weight));
};

// A y range for a series whose values differ only by rounding (a constant such as an epsilon that reached its
// end, averaged per log interval): plotly would zoom into a 1e-17-wide band and label its ticks with 17 digits.
// Undefined for any series with a real spread, so plotly's own autorange draws it.
window.rlwebFlatRange = function flatRange(arrays) {
  "use strict";
  let low = Infinity;
  let high = -Infinity;
  for (const values of arrays) {
    for (const value of values || []) {
      if (value === null || !Number.isFinite(value)) continue;
      if (value < low) low = value;
      if (value > high) high = value;
    }
  }
  if (low > high) return undefined;
  const scale = Math.max(Math.abs(low), Math.abs(high));
  if (high - low > 1e-9 * scale) return undefined;
  const pad = scale > 0 ? scale / 2 : 1;
  return [low - pad, high + pad];
};

// How long a page waits before it opens a live stream again after its `failures`-th HTTP error in a row (the
// browser gives up on an EventSource after one): 2 s, doubling up to a minute, as live_worker.js waits.
window.rlwebRetryDelay = function retryDelay(failures) {
  "use strict";
  return Math.min(2000 * 2 ** (failures - 1), 60_000);
};
