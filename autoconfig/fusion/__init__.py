"""Fusion: mapping-type classification, legality, the cost model, the DP plan search,
and TVM's greedy rules as the baseline."""

from __future__ import annotations

from autoconfig.decisions import DecisionCache
from autoconfig.errors import AutoconfigError
from autoconfig.fusion.classify import emittable_groups
from autoconfig.fusion.greedy import plan_greedy
from autoconfig.fusion.planning import FusionCost, Plan, plan_cost, plan_dp
from autoconfig.graph.ir import Graph
from autoconfig.profile import HardwareProfile

STRATEGIES = ("dp", "greedy", "none")


def plan(graph: Graph, profile: HardwareProfile, strategy: str = "dp", decisions: DecisionCache | None = None,
         threads: int = 1) -> Plan:  # fmt: skip
    """The fusion plan of `graph` by `strategy`: dp, greedy (TVM rules) or none, priced
    for a model run on `threads` threads; the operator models' answers its costs need
    are kept in `decisions` when given."""
    cost = FusionCost.of(profile, decisions, graph, threads)
    if strategy == "dp":
        found = plan_dp(graph, cost)
    elif strategy == "greedy":
        found = plan_greedy(graph, cost)
    elif strategy == "none":
        found = Plan([[v] for v in range(len(graph.nodes))], 0.0, 0, 0.0, "none")
    else:
        raise AutoconfigError(f"unknown fusion strategy {strategy!r}: {', '.join(STRATEGIES)}")
    groups = emittable_groups(graph, found.groups)
    if sorted(groups) == sorted(map(sorted, found.groups)) and strategy != "none":
        return found
    total, traffic = plan_cost(graph, groups, cost)
    return Plan(groups, total, traffic, found.search_seconds, strategy)
