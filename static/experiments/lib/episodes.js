// The run page's episode count. A metric holding one value per finished episode counts them: rlweb's own
// `rollout/episode_return`, or `charts/episodic_return` from a CleanRL-style script logging through rlweb_client
// (or a TensorBoard folder imported). Means over many episodes (SB3's `rollout/ep_rew_mean`) count nothing.
export const EPISODE_RETURN_KEYS = ["rollout/episode_return", "charts/episodic_return"];

// The episodes in the history's downsampled series: the count of values summarised, of the first key present.
export function episodesInHistory(metrics) {
  const key = EPISODE_RETURN_KEYS.find((name) => metrics[name]);
  return key ? metrics[key].count : 0;
}

// Whether a live event is the end of one episode: it holds an episode's return.
export function endsAnEpisode(event) {
  const values = event.values || {};
  return EPISODE_RETURN_KEYS.some((name) => typeof values[name] === "number");
}

// The return of the episode a live event ends (the first key present), or null.
export function episodeReturn(event) {
  const values = event.values || {};
  const key = EPISODE_RETURN_KEYS.find((name) => typeof values[name] === "number");
  return key ? values[key] : null;
}

// The best episode return in the history's downsampled series: exact, as every bucket keeps its largest value.
export function bestEpisodeReturnInHistory(metrics) {
  const key = EPISODE_RETURN_KEYS.find((name) => metrics[name]);
  const values = key ? metrics[key].value.filter((value) => typeof value === "number") : [];
  return values.length ? Math.max(...values) : null;
}
