// What the run page and the compare page share: TensorBoard's exponential moving average, debiased so the
// first points are not pulled towards 0; gaps (null, NaN) stay gaps and do not move the average.
window.rlwebSmooth = function smooth(values, weight) {
  "use strict";
  if (!weight) return values;
  let last = 0;
  let norm = 0;
  return values.map((value) => {
    if (value === null || !Number.isFinite(value)) return null;
    last = last * weight + (1 - weight) * value;
    norm = norm * weight + (1 - weight);
    return last / norm;
  });
};
