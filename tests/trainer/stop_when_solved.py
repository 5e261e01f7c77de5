"""A sink for learning checks: it stops a run at its first evaluation that reaches the check's score, since the rest
of the budget would prove nothing more, and keeps the best evaluation. The check itself stays "within N steps"; only
the steps after it are saved."""

from trainer.events import Sink


class StopWhenSolved(Sink):
    def __init__(self, threshold: float):
        self.threshold = threshold
        self.best = float("-inf")

    def emit(self, event: dict) -> None:
        if event["kind"] == "eval":
            self.best = max(self.best, event["values"]["eval/return_mean"])

    def should_stop(self) -> bool:
        return self.best >= self.threshold
