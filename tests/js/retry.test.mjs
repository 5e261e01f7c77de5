// lib/retry.js: the wait before a page (or the shared worker) opens a refused live stream again.
import assert from "node:assert/strict";
import {test} from "node:test";

import {retryDelay} from "../../static/experiments/lib/retry.js";

test("the first retry waits 2 s and each failure after it doubles the wait", () => {
  assert.deepEqual([1, 2, 3, 4, 5].map(retryDelay), [2000, 4000, 8000, 16_000, 32_000]);
});

test("the wait stops growing at a minute", () => {
  assert.equal(retryDelay(6), 60_000);
  assert.equal(retryDelay(100), 60_000);
});
