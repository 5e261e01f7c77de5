// lib/live_tail.js: where the run page's live tail goes, and when plotly must draw a chart instead.
import assert from "node:assert/strict";
import {test} from "node:test";

import {liveXRange, tailPoints, tailWithinAxes, untilPlotlyDraws} from "../../static/experiments/lib/live_tail.js";

test("a live chart's x axis leaves room for as much again as its last 100 points took", () => {
  const x = Array.from({length: 201}, (_, index) => index * 10);  // 0 to 2000, the last 100 took 1000
  assert.deepEqual(liveXRange(x, true), [0, 3000]);
});

test("the room is at least 5% of the range", () => {
  // the last 100 points took 10.99 of 1000.99
  const slow = [...Array.from({length: 100}, (_, index) => index * 10),
                ...Array.from({length: 100}, (_, index) => 1000 + index * 0.01)];
  const [low, high] = liveXRange(slow, true);
  assert.equal(low, 0);
  assert.ok(Math.abs(high - 1000.99 * 1.05) < 1e-9, high);
});

test("an ended run's chart is left to plotly's autorange", () => {
  assert.equal(liveXRange([0, 10, 20], false), undefined);
});

test("a live chart with one point is padded around it, and so is an ended one", () => {
  assert.deepEqual(liveXRange([1000], true), [500, 1500]);
  assert.deepEqual(liveXRange([1000, 1000], false), [500, 1500]);
  assert.deepEqual(liveXRange([0], true), [-1, 1]);
});

test("no points give no range", () => {
  assert.equal(liveXRange([], true), undefined);
});

const axes = {xRange: [0, 100], yRange: [-1, 1]};

test("points within the axes plotly drew fit on the tail", () => {
  assert.equal(tailWithinAxes([10, 50, 100], [5, 0.5, -1], 1, axes), true);  // the first is plotly's
});

test("a point past either axis needs plotly", () => {
  assert.equal(tailWithinAxes([10, 101], [0, 0], 1, axes), false);
  assert.equal(tailWithinAxes([10, 20], [0, 1.01], 1, axes), false);
  assert.equal(tailWithinAxes([10, 20], [0, NaN], 1, axes), false);
});

test("reversed ranges are read in either order", () => {
  assert.equal(tailWithinAxes([50], [0], 0, {xRange: [100, 0], yRange: [1, -1]}), true);
});

test("on an axis the user zoomed, the tail is cut instead of checked", () => {
  assert.equal(tailWithinAxes([500], [0], 0, {...axes, zoomed: {x: true, y: false}}), true);
  assert.equal(tailWithinAxes([50], [50], 0, {...axes, zoomed: {x: false, y: true}}), true);
  assert.equal(tailWithinAxes([500], [50], 0, {...axes, zoomed: {x: false, y: true}}), false);
});

test("on a log axis the values are compared in the axis's own coordinates", () => {
  const log = {xRange: [0, 100], yRange: [0, 2], toLinearY: Math.log10};  // 1 to 100
  assert.equal(tailWithinAxes([10], [99], 0, log), true);
  assert.equal(tailWithinAxes([10], [101], 0, log), false);
});

test("the tail starts at the last point plotly drew and skips gaps", () => {
  const points = tailPoints([0, 1, 2, 3, 4], [10, 20, null, 40, 50], 2, (x) => x * 100, (y) => 200 - y);
  assert.equal(points, "100.0,180.0 300.0,160.0 400.0,150.0");
});

test("with nothing drawn yet the tail starts at the first point", () => {
  assert.equal(tailPoints([0, 1], [1, 2], 0, (x) => x, (y) => y / 3), "0.0,0.3 1.0,0.7");
});

test("plotly takes the tail in an interval after its last draw, at once when that has passed", () => {
  assert.equal(untilPlotlyDraws(1000, 3000, 2500), 1500);
  assert.equal(untilPlotlyDraws(1000, 3000, 5000), 0);
  assert.equal(untilPlotlyDraws(-Infinity, 3000, 10), 0);
});
