// lib/episodes.js: the run page's episode count, for rlweb's runs and for a CleanRL-style script's.
import assert from "node:assert/strict";
import {test} from "node:test";

import {endsAnEpisode, episodesInHistory} from "../../static/experiments/lib/episodes.js";

test("the history's episodes are the values summarised of rlweb's or CleanRL's episode return", () => {
  assert.equal(episodesInHistory({"rollout/episode_return": {count: 42}, "train/loss": {count: 900}}), 42);
  assert.equal(episodesInHistory({"charts/episodic_return": {count: 17}, "losses/value_loss": {count: 300}}), 17);
  assert.equal(episodesInHistory({"rollout/ep_rew_mean": {count: 30}}), 0);  // SB3's mean over 100 episodes
  assert.equal(episodesInHistory({}), 0);
});

test("a live event ends an episode when it holds an episode's return", () => {
  assert.ok(endsAnEpisode({kind: "episode", values: {"rollout/episode_return": 21.0, "rollout/episode_length": 90}}));
  assert.ok(endsAnEpisode({kind: "train", values: {"charts/episodic_return": -20.0, "charts/episodic_length": 812}}));
  assert.ok(!endsAnEpisode({kind: "train", values: {"losses/value_loss": 0.3}}));
  assert.ok(!endsAnEpisode({kind: "episode", values: {"rollout/ep_rew_mean": 10}}));
  assert.ok(!endsAnEpisode({kind: "checkpoint", values: {}}));
});
