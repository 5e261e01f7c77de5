"""trainer.events: the event schema and the sinks that receive events."""

import io
import json

from trainer.events import JsonLinesSink, ListSink, MultiSink, Sink, StdoutSink, make_event


def test_make_event_stamps_a_whole_step_and_a_rounded_time():
    event = make_event("train", 12.0, 3.1415926, {"train/loss": 0.5})
    assert event == {"kind": "train", "step": 12, "time": 3.1416, "values": {"train/loss": 0.5}}
    assert type(event["step"]) is int


def test_the_base_sink_ignores_events_and_never_asks_to_stop():
    sink = Sink()
    sink.emit(make_event("started", 0, 0.0, {}))
    assert sink.should_stop() is False
    sink.close()


def test_the_list_sink_keeps_events_in_order_and_filters_them_by_kind():
    sink = ListSink()
    for step, kind in enumerate(["started", "episode", "train", "episode"]):
        sink.emit(make_event(kind, step, 0.0, {}))
    assert [event["kind"] for event in sink.events] == ["started", "episode", "train", "episode"]
    assert [event["step"] for event in sink.of_kind("episode")] == [1, 3]


def test_the_list_sink_asks_to_stop_once_an_event_reaches_stop_after():
    sink = ListSink(stop_after=100)
    assert not sink.should_stop()  # no event yet
    sink.emit(make_event("train", 99, 0.0, {}))
    assert not sink.should_stop()
    sink.emit(make_event("train", 100, 0.0, {}))
    assert sink.should_stop()
    assert not ListSink().should_stop()


def test_the_json_lines_sink_appends_one_line_per_event(tmp_path):
    path = tmp_path / "deeper" / "events.jsonl"
    first, second = make_event("started", 0, 0.0, {"seed": 1}), make_event("eval", 50, 1.5, {"eval/return_mean": 9.0})
    sink = JsonLinesSink(path)  # makes the folder
    sink.emit(first)
    sink.emit(second)
    sink.close()
    again = JsonLinesSink(path)  # a resumed run appends
    again.emit(make_event("finished", 60, 2.0, {"status": "succeeded"}))
    again.close()
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines[:2]] == [first, second]
    assert json.loads(lines[2])["kind"] == "finished" and len(lines) == 3


class Stopping(Sink):
    def __init__(self, stop: bool):
        self.stop, self.closed = stop, False

    def should_stop(self) -> bool:
        return self.stop

    def close(self) -> None:
        self.closed = True


def test_the_multi_sink_fans_out_and_stops_when_any_sink_asks():
    first, second = ListSink(), ListSink()
    event = make_event("episode", 5, 0.1, {"rollout/episode_return": 3.0})
    both = MultiSink(first, None, second)  # None is left out (an optional sink)
    both.emit(event)
    assert first.events == second.events == [event]
    assert not MultiSink(Stopping(False), Stopping(False)).should_stop()
    assert MultiSink(Stopping(False), Stopping(True)).should_stop()
    closing = [Stopping(False), Stopping(False)]
    MultiSink(*closing).close()
    assert all(sink.closed for sink in closing)


def test_the_stdout_sink_prints_every_nth_episode_and_skips_train_and_time_events():
    stream = io.StringIO()
    sink = StdoutSink(stream, episode_every=2)
    for step in (1, 2, 3, 4):
        sink.emit(make_event("episode", step, 0.0, {"rollout/episode_return": 0.123456}))
    sink.emit(make_event("train", 5, 0.0, {"train/loss": 1.0}))
    sink.emit(make_event("time", 5, 0.0, {"time/steps_per_second": 10.0}))
    sink.emit(make_event("failed", 6, 0.0, {"error": "boom", "traceback": "Traceback: here"}))
    assert stream.getvalue().splitlines() == [
        "[   episode] step=2 rollout/episode_return=0.1235",
        "[   episode] step=4 rollout/episode_return=0.1235",
        "[    failed] step=6 error=boom",
        "Traceback: here",
    ]
