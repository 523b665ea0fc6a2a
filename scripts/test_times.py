#!/usr/bin/env python3
"""Where a test run's time went: minutes by area and the slowest tests, read from the junit XML
that ``scripts/check`` writes (``test-artifacts/junit.xml``).

A test's time is its set-up, call and tear-down together, so a session fixture (the test
cluster, a registry) counts towards the first test that uses it. The area is the ``area``
property each test carries (``tests/conftest.py``); a file from before it existed is sorted by
its test's path. ``scripts/check`` runs the test cluster's tests beside the others and writes
one XML per stream; given none, every ``test-artifacts/junit*.xml`` is read, and each stream's
wall time is printed after the sums (two streams side by side take less than their sum).
Usage: ``scripts/test_times.py [JUNIT_XML ...] [--top N]``.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
AREAS = ("unit", "local", "cluster", "browser", "notebooks")


@dataclass(frozen=True)
class Case:
    """One test of the run: its id, area, seconds and outcome."""

    name: str
    area: str
    seconds: float
    outcome: str


def area_by_path(classname: str) -> str:
    """The area of a test with no ``area`` property, from its module (``tests.unit.test_x``)."""
    if classname.startswith("tests.unit."):
        return "unit"
    if classname.startswith("tests.browser."):
        return "browser"
    if classname.startswith("tests.integration.test_notebooks"):
        return "notebooks"
    if any(f".{m}" in classname for m in ("test_k8s_", "test_cluster_", "test_kubeflow_")):
        return "cluster"
    return "local"


def outcome_of(case: ET.Element) -> str:
    for child, word in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        if case.find(child) is not None:
            return word
    return "passed"


def read_cases(xml: Path) -> list[Case]:
    """Every ``testcase`` of the junit XML at ``xml``."""
    cases = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        classname = case.get("classname", "")
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        area = props.get("area") or area_by_path(classname)
        name = f"{classname}::{case.get('name', '')}"
        cases.append(Case(name, area, float(case.get("time", "0") or 0), outcome_of(case)))
    return cases


def by_area(cases: list[Case]) -> dict[str, tuple[int, float]]:
    """Area -> (number of tests, seconds), in :data:`AREAS` order then any other."""
    counts: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for case in cases:
        counts[case.area] += 1
        seconds[case.area] += case.seconds
    order = [a for a in AREAS if a in counts] + sorted(set(counts) - set(AREAS))
    return {a: (counts[a], seconds[a]) for a in order}


def report(cases: list[Case], top: int) -> str:
    """The summary: minutes by area, the total, outcomes, and the ``top`` slowest tests."""
    total = sum(c.seconds for c in cases)
    lines = [f"{'area':<10} {'tests':>6} {'minutes':>8} {'share':>6}"]
    for area, (count, secs) in by_area(cases).items():
        share = secs / total if total else 0.0
        lines.append(f"{area:<10} {count:>6} {secs / 60:>8.1f} {share:>6.0%}")
    lines.append(f"{'all':<10} {len(cases):>6} {total / 60:>8.1f}")
    outcomes: dict[str, int] = defaultdict(int)
    for case in cases:
        outcomes[case.outcome] += 1
    lines.append(", ".join(f"{n} {word}" for word, n in sorted(outcomes.items())))
    lines.append("")
    lines.append(f"the {top} slowest tests (seconds, area, test):")
    for case in sorted(cases, key=lambda c: c.seconds, reverse=True)[:top]:
        lines.append(f"{case.seconds:8.1f}  {case.area:<9} {case.name}")
    return "\n".join(lines)


def wall_seconds(xml: Path) -> float:
    """The stream's own run time: the ``time`` pytest writes on each test suite."""
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    return sum(float(s.get("time", "0") or 0) for s in suites)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("xml", nargs="*", type=Path)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)
    xmls = args.xml or sorted(ARTIFACTS.glob("junit*.xml"))
    missing = [x for x in xmls if not x.exists()]
    if not xmls or missing:
        where = ", ".join(map(str, missing)) or f"{ARTIFACTS}/junit*.xml"
        print(f"{where}: no such file (scripts/check writes it)", file=sys.stderr)
        return 2
    print(report([case for x in xmls for case in read_cases(x)], args.top))
    if len(xmls) > 1:
        print("\nwall time of each stream (they ran side by side):")
        for x in xmls:
            print(f"{wall_seconds(x) / 60:8.1f} min  {x.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
