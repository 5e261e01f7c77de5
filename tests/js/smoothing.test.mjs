// lib/smoothing.js: TensorBoard's debiased moving average, and the padded y range of a flat series.
import assert from "node:assert/strict";
import {test} from "node:test";

import {flatRange, smooth, smoother} from "../../static/experiments/lib/smoothing.js";

test("the first smoothed value is the first value, not pulled towards 0", () => {
  assert.equal(smoother(0.9)(5), 5);
});

test("it matches the debiased average worked by hand", () => {
  // weight 0.5: last = 0.5 * 2 = 1, norm = 0.5; then last = 0.5 + 0.5 * 4 = 2.5, norm = 0.75
  assert.deepEqual(smooth([2, 4], 0.5), [2, 2.5 / 0.75]);
});

test("a weight of 0 leaves the values as they are", () => {
  const values = [1, 5, 3];
  assert.equal(smooth(values, 0), values);
});

test("gaps stay gaps and do not move the average", () => {
  assert.deepEqual(smooth([2, null, NaN, 4], 0.5), [2, null, null, 2.5 / 0.75]);
});

test("a constant stays constant", () => {
  assert.ok(smooth([7, 7, 7, 7], 0.6).every((value) => Math.abs(value - 7) < 1e-12));
});

test("one value at a time gives the same line as the whole series", () => {
  const values = [3, -1, 4, 1, 5, 9, 2, 6];
  const next = smoother(0.8);
  assert.deepEqual(values.map((value) => next(value)), smooth(values, 0.8));
});

test("a series that differs only by rounding gets a range padded by half its size", () => {
  assert.deepEqual(flatRange([[0.04, 0.040000000000000036, 0.039999999999999994]]),
                   [0.039999999999999994 - 0.020000000000000018, 0.040000000000000036 + 0.020000000000000018]);
});

test("a series of zeros gets a range of -1 to 1", () => {
  assert.deepEqual(flatRange([[0, 0], [0]]), [-1, 1]);
});

test("a series with a real spread is left to plotly's autorange", () => {
  assert.equal(flatRange([[-20.5, -19.25, null]]), undefined);
});

test("a flat range looks at every series and skips gaps", () => {
  assert.deepEqual(flatRange([[200, null], [NaN, 200], undefined]), [100, 300]);
  assert.equal(flatRange([[200], [201]]), undefined);
});

test("no values at all give no range", () => {
  assert.equal(flatRange([[], [null]]), undefined);
});
