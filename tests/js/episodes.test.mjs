// lib/episodes.js: the run page's episode count, for rlweb's runs and for a CleanRL-style script's.
import assert from "node:assert/strict";
import {test} from "node:test";

import {bestEpisodeReturnInHistory, endsAnEpisode, episodeReturn, episodesInHistory}
  from "../../static/experiments/lib/episodes.js";

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

test("an episode's return is read from either key, and the history's best from the first key present", () => {
  assert.equal(episodeReturn({kind: "train", values: {"charts/episodic_return": -20.0}}), -20.0);
  assert.equal(episodeReturn({kind: "episode", values: {"rollout/episode_return": 21.0}}), 21.0);
  assert.equal(episodeReturn({kind: "train", values: {"losses/value_loss": 0.3}}), null);
  assert.equal(bestEpisodeReturnInHistory({"charts/episodic_return": {value: [1.5, 9.0, null, 4.0], count: 4}}), 9.0);
  assert.equal(bestEpisodeReturnInHistory({"train/loss": {value: [3.0], count: 1}}), null);
});
