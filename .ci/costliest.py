"""CI's closing table: the tests that cost the most CPU (their pytest process and its reaped children), from the
reports tests/cpu_report.py wrote for each part, and each part's total. Where CI's two cores go, every run."""

import csv
import sys
from collections import defaultdict
from pathlib import Path

SHOWN = 25


def main(paths: list[str]) -> None:
    cpu, wall, part_of = defaultdict(float), defaultdict(float), {}
    for path in paths:
        part = Path(path).stem.removeprefix("cpu-")
        with open(path, newline="") as report:
            for row in csv.DictReader(report, delimiter="\t"):
                cpu[row["test"]] += float(row["pytest_cpu_s"]) + float(row["children_cpu_s"])
                wall[row["test"]] += float(row["wall_s"])
                part_of[row["test"]] = part
    totals = defaultdict(lambda: [0.0, 0.0, 0])
    for test, seconds in cpu.items():
        total = totals[part_of[test]]
        total[0], total[1], total[2] = total[0] + seconds, total[1] + wall[test], total[2] + 1
    print("=== CPU seconds by part (pytest and its children; the tests' wall seconds added up):")
    for part, (seconds, walls, count) in sorted(totals.items(), key=lambda item: -item[1][0]):
        print(f"{seconds:8.0f} CPU s {walls:8.0f} wall s {count:5d} tests  {part}")
    print(f"=== the {SHOWN} tests that cost the most CPU (setup, call and teardown):")
    for test in sorted(cpu, key=cpu.get, reverse=True)[:SHOWN]:
        print(f"{cpu[test]:8.1f} CPU s {wall[test]:8.1f} wall s  {test}")


if __name__ == "__main__":
    main(sys.argv[1:])
