// What the run page and the compare page share: TensorBoard's exponential moving average, debiased so the
// first points are not pulled towards 0; gaps (null, NaN) stay gaps and do not move the average.
// `smoother(weight)` is the same average one value at a time (the run page's live points);
// `smooth(values, weight)` smooths a whole series with it.
// (No DOM here: the pages import it, and so do the unit tests in tests/js under node.)

export function smoother(weight) {
  let last = 0;
  let norm = 0;
  return function next(value) {
    if (value === null || !Number.isFinite(value)) return null;
    last = last * weight + (1 - weight) * value;
    norm = norm * weight + (1 - weight);
    return last / norm;
  };
}

export function smooth(values, weight) {
  if (!weight) return values;
  return values.map(smoother(weight));
}

// A y range for a series whose values differ only by rounding (a constant such as an epsilon that reached its
// end, averaged per log interval): plotly would zoom into a 1e-17-wide band and label its ticks with 17 digits.
// Undefined for any series with a real spread, so plotly's own autorange draws it.
export function flatRange(arrays) {
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
}
