"""A pytest plugin that says what each test cost the machine, to find where CI's two cores go:
`pytest -p tests.cpu_report --cpu-report=FILE ...` writes one tab-separated line per test phase (setup, call,
teardown): its wall seconds, the CPU seconds of the pytest process, of its reaped children, and of the whole machine
(every process: servers and browsers a test started but has not reaped yet count too). Run a part of the suite on a
quiet machine for the machine column to be the test's own; sort by it."""

from __future__ import annotations

import os
import resource
import time

import psutil
import pytest


def pytest_addoption(parser):
    parser.addoption("--cpu-report", metavar="FILE", help="write each test phase's wall and CPU seconds to FILE")


def _cpu_now() -> tuple[float, float, float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    machine = psutil.cpu_times()
    busy = sum(getattr(machine, field, 0.0) for field in ("user", "nice", "system", "irq", "softirq", "steal"))
    return time.monotonic(), own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime, busy


class CpuReport:
    def __init__(self, path: str):
        self.out = open(path, "w")
        self.out.write("test\tphase\twall_s\tpytest_cpu_s\tchildren_cpu_s\tmachine_cpu_s\n")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item):
        yield from self._measured(item, "setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        yield from self._measured(item, "call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item):
        yield from self._measured(item, "teardown")

    def _measured(self, item, phase: str):
        before = _cpu_now()
        yield
        after = _cpu_now()
        wall, own, children, machine = (b - a for a, b in zip(before, after))
        self.out.write(f"{item.nodeid}\t{phase}\t{wall:.2f}\t{own:.2f}\t{children:.2f}\t{machine:.2f}\n")
        self.out.flush()

    def pytest_unconfigure(self, config):
        self.out.close()


def pytest_configure(config):
    path = config.getoption("--cpu-report")
    if path:
        config.pluginmanager.register(CpuReport(os.path.abspath(path)), "cpu-report-writer")
