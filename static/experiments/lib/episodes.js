// The run page's episode count. A metric holding one value per finished episode counts them: rlweb's own
// `rollout/episode_return`, or `charts/episodic_return` from a CleanRL-style script logging through rlweb_client
// (or a TensorBoard folder imported). Means over many episodes (SB3's `rollout/ep_rew_mean`) count nothing.
export const EPISODE_RETURN_KEYS = ["rollout/episode_return", "charts/episodic_return"];

// The history's downsampled series of episode returns: the first key present, or undefined.
function episodeSeries(metrics) {
  const key = EPISODE_RETURN_KEYS.find((name) => metrics[name]);
  return key ? metrics[key] : undefined;
}

// The episodes in the history's downsampled series: the count of values summarised.
export function episodesInHistory(metrics) {
  const series = episodeSeries(metrics);
  return series ? series.count : 0;
}

// The return of the episode a live event ends (the first key present), or null.
export function episodeReturn(event) {
  const values = event.values || {};
  const key = EPISODE_RETURN_KEYS.find((name) => typeof values[name] === "number");
  return key ? values[key] : null;
}

// Whether a live event is the end of one episode: it holds an episode's return.
export function endsAnEpisode(event) {
  return episodeReturn(event) !== null;
}

// The best episode return in the history's downsampled series: exact, as every bucket keeps its largest value.
export function bestEpisodeReturnInHistory(metrics) {
  const series = episodeSeries(metrics);
  const values = series ? series.value.filter((value) => typeof value === "number") : [];
  return values.length ? Math.max(...values) : null;
}
