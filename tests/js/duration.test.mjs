// lib/duration.js: the run page's "Duration", written as the server writes it and counted on while the run runs.
import assert from "node:assert/strict";
import {mock, test} from "node:test";

import {durationClock, durationText} from "../../static/experiments/lib/duration.js";

test("a duration reads as run_views.duration_text writes it", () => {
  assert.equal(durationText(0.42, 1), "0.4 s");
  assert.equal(durationText(245, 1), "4 min 5 s");
  assert.equal(durationText(3 * 3600 + 300, 2), "3 h 5 min over 2 attempts");
});

test("a running run's duration goes on counting every second from what the page was drawn with", () => {
  mock.timers.enable({apis: ["setInterval"]});
  try {
    let now = 1000;
    const shown = [];
    const stop = durationClock((text) => shown.push(text), 0.4, 1, () => now);
    assert.deepEqual(shown, ["running for 0.4 s"]);
    now += 2000;
    mock.timers.tick(1000);
    assert.equal(shown.at(-1), "running for 2.4 s");
    now += 60_000;
    mock.timers.tick(1000);
    assert.equal(shown.at(-1), "running for 1 min 2 s");
    stop();
    mock.timers.tick(5000);
    assert.equal(shown.length, 3);  // stopped: the end's own text stays
  } finally {
    mock.timers.reset();
  }
});
