"""A sink for learning checks: it stops a run at its first evaluation that reaches the check's score, since the rest
of the budget would prove nothing more. The check itself stays "within N steps"; only the steps after it are saved."""

from trainer.events import Sink


class StopOnceReached(Sink):
    def __init__(self, score: float):
        self.score = score
        self.reached = False

    def emit(self, event: dict) -> None:
        self.reached |= event["kind"] == "eval" and event["values"]["eval/return_mean"] >= self.score

    def should_stop(self) -> bool:
        return self.reached
