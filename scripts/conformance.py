"""ONNX's backend node tests through autoconfig's backend: per operator of the table,
how many tests pass, fail (a wrong answer) or are refused (with the reasons), with
parameter inputs bound as constants and as given; then the operators outside the
table, ranked by how many node tests need them.

    python scripts/conformance.py [--profile P] [--target T] [--json FILE]

Builds every node test whose operators are all in the table (a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tqdm import tqdm  # noqa: E402

from autoconfig import conformance  # noqa: E402


def outcomes(tests: list[conformance.NodeTest], bind: bool, options: dict) -> dict[str, conformance.Outcome]:
    """Each test's outcome, with parameters bound or as given."""
    found = {}
    for test in tqdm(tests, desc="bound" if bind else "as given", unit="test", leave=False):
        found[test.name] = conformance.run(test, bind_parameters=bind, **options)
    return found


def per_operator(tests: list[conformance.NodeTest], found: dict[str, conformance.Outcome]) -> dict[str, collections.Counter]:
    """Per operator, its tests' statuses (a test counts for each operator it holds)."""
    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for test in tests:
        for op in test.operators:
            table[op][found[test.name].status] += 1
    return table


def report(tests: list[conformance.NodeTest], bound: dict, given: dict) -> None:
    floats = [t for t in tests if t.float32()]
    for label, found in (("parameters bound", bound), ("as given", given)):
        all_counts = collections.Counter(o.status for o in found.values())
        float_counts = collections.Counter(found[t.name].status for t in floats)
        print(f"{label}: {dict(all_counts)} of {len(tests)}; float32 only: {dict(float_counts)} of {len(floats)} "
              f"({100 * float_counts['passed'] / max(1, len(floats)):.1f}% passed)")
    print(f"\n{'operator':<20} {'passed':>7} {'failed':>7} {'refused':>8}   (parameters bound)")
    for op, counts in sorted(per_operator(tests, bound).items()):
        print(f"{op:<20} {counts['passed']:>7} {counts['failed']:>7} {counts['refused']:>8}")
    reasons = collections.Counter(conformance.reason(o.detail) for o in bound.values() if o.status == "refused")
    print("\nrefusals (parameters bound), by reason:")
    for why, count in reasons.most_common():
        print(f"  {count:>4}  {why}")
    for name, outcome in bound.items():
        if outcome.status == "failed":
            spec = conformance.SPEC_OVER_REFERENCE.get(name)
            print(f"FAILED {name}: {outcome.detail}" + (f" (expected: the spec says {spec}, as onnxruntime "
                                                        "does; the test's data is onnx's reference)" if spec else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default=None, help="hardware profile (default: this machine's)")
    parser.add_argument("--target", default=None, help="target (default: the profile's)")
    parser.add_argument("--json", type=Path, default=None, help="write every test's outcome here")
    args = parser.parse_args()
    everything = conformance.node_tests()
    tests = [t for t in everything if conformance.in_table(t)]
    options = {"profile": args.profile, "target": args.target}
    bound, given = outcomes(tests, True, options), outcomes(tests, False, options)
    report(tests, bound, given)
    print(f"\noperators outside the table, by the node tests needing them ({len(everything)} tests in all):")
    for op, count in conformance.operators_outside(everything):
        print(f"  {count:>4}  {op}")
    if args.json:
        args.json.write_text(json.dumps({name: {"bound": [bound[name].status, bound[name].detail],
                                                "given": [given[name].status, given[name].detail]}
                                         for name in bound}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
