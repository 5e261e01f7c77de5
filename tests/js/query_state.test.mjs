// lib/query_state.js: the compare page keeps its statistics' options in the URL beside the charts' options.
import assert from "node:assert/strict";
import {test} from "node:test";

import {mergeQuery, readStatistics, statisticsParams} from "../../static/experiments/lib/query_state.js";

const OFFERED = {by: ["algorithm", "experiment", "tag", "hp:lr"], metric: ["eval/return_mean", "rollout/episode_return"],
                 count: ["final", "best", "last"]};

test("each script rewrites only its own keys: the charts' options keep the statistics' and back", () => {
  const shared = "?runs=1,2&by=tag&count=last&last=3&smooth=0.6";
  const charts = mergeQuery(shared, ["runs", "group", "smooth", "log"],
                            new URLSearchParams({runs: "1,2", group: "algorithm", smooth: "0.8"}));
  assert.equal(charts, "?runs=1,2&by=tag&count=last&last=3&group=algorithm&smooth=0.8");
  const stats = mergeQuery(charts, ["by", "metric", "count", "last", "improve", "over"],
                           statisticsParams({by: "algorithm", count: "best", last: "3", improve: "ppo", over: "dqn"}));
  assert.equal(stats, "?runs=1,2&group=algorithm&smooth=0.8&count=best&improve=ppo&over=dqn");
});

test("the URL holds only what differs from the defaults, N only when the last N count", () => {
  assert.equal(statisticsParams({by: "algorithm", metric: "eval/return_mean", count: "final", last: "5"}).toString(), "");
  assert.equal(statisticsParams({by: "hp:lr", count: "last", last: "10"}).toString(), "by=hp%3Alr&count=last&last=10");
});

test("a shared link's options are read back where the page offers them, the rest ignored", () => {
  const link = "?runs=4,5&by=hp:lr&metric=rollout/episode_return&count=last&last=12&improve=ppo&over=dqn&smooth=0.5";
  assert.deepEqual(readStatistics(link, OFFERED), {by: "hp:lr", metric: "rollout/episode_return", count: "last",
                                                   last: "12", improve: "ppo", over: "dqn"});
  const odd = "?by=module.path&metric=secret&count=worst&last=0&improve=";
  assert.deepEqual(readStatistics(odd, OFFERED), {});
  assert.deepEqual(readStatistics("?last=1001", OFFERED), {});
  assert.deepEqual(readStatistics("?last=7", OFFERED), {last: "7"});
});
