"""Where a run stands: its final (or latest) evaluation beside the published score for its task and algorithm, and
its normalised score (rlweb.scores), on the run page; the published band for its return charts."""

from django import template

from rlweb.experiments.compare_stats import baseline_bands
from rlweb.scores import baselines, normalise

register = template.Library()


@register.inclusion_tag("experiments/_run_standing.html")
def run_standing(run):
    experiment = run.experiment
    final = run.eval_return_mean
    standing = baselines.standing(experiment.env_id, experiment.algorithm, final)
    reference = normalise.reference(experiment.env_id)
    score = normalise.normalise(experiment.env_id, final) if final is not None else None
    text = standing["text"] if standing else None
    if text and final is not None and not run.is_finished:
        text = text.replace("final ", "last eval ", 1)
    return {"standing": standing, "text": text, "reference": reference, "normalised": score,
            "bands": baseline_bands([run]), "curves": curves_within(run)}


def curves_within(run) -> list[dict]:
    """Published learning curves for the run's task and algorithm, cut at its budget of agent steps."""
    return [{key: curve[key] for key in ("label", "published_env_id", "band", "x_note", "source", "steps", "mean",
                                          "low", "high")}
            for curve in baselines.curves(run.experiment.env_id, run.experiment.algorithm, up_to=run.total_steps)]
