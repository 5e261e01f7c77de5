// lib/downsample.js: the run page's live series past its limit keep the extremes of each 4 points.
import assert from "node:assert/strict";
import {test} from "node:test";

import {keepExtremes} from "../../static/experiments/lib/downsample.js";

test("each 4 points keep their smallest and largest, in their order", () => {
  const kept = keepExtremes({step: [1, 2, 3, 4, 5, 6, 7, 8], value: [5, 9, 1, 4, 2, 2, 8, 3]});
  assert.deepEqual(kept, {step: [2, 3, 5, 7], value: [9, 1, 2, 8]});
});

test("every column follows the value column", () => {
  const kept = keepExtremes({step: [10, 20, 30, 40], time: [0.1, 0.2, 0.3, 0.4], value: [3, 1, 2, 7],
                             low: [2, 0, 1, 6], high: [4, 2, 3, 8]});
  assert.deepEqual(kept, {step: [20, 40], time: [0.2, 0.4], value: [1, 7], low: [0, 6], high: [2, 8]});
});

test("a group of equal values keeps its first point once", () => {
  assert.deepEqual(keepExtremes({step: [1, 2, 3, 4], value: [6, 6, 6, 6]}), {step: [1], value: [6]});
});

test("a last group shorter than 4 is kept the same way", () => {
  const kept = keepExtremes({step: [1, 2, 3, 4, 5, 6], value: [0, 1, 2, 3, -4, 4]});
  assert.deepEqual(kept, {step: [1, 4, 5, 6], value: [0, 3, -4, 4]});
});

test("the count shrinks to at most half, and the extremes of the whole series stay", () => {
  const value = Array.from({length: 4001}, (_, index) => Math.sin(index / 7) * 100 + (index === 1234 ? 1e4 : 0));
  const kept = keepExtremes({step: value.map((_, index) => index), value});
  assert.ok(kept.value.length <= 2001);
  assert.equal(Math.max(...kept.value), Math.max(...value));
  assert.equal(Math.min(...kept.value), Math.min(...value));
  assert.deepEqual(kept.step, [...kept.step].sort((a, b) => a - b));
});

test("the columns given are left as they are", () => {
  const columns = {step: [1, 2, 3, 4, 5], value: [1, 2, 3, 4, 5]};
  keepExtremes(columns);
  assert.deepEqual(columns, {step: [1, 2, 3, 4, 5], value: [1, 2, 3, 4, 5]});
});
