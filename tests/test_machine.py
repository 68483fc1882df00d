"""The machine view the models read: per-width load rates and the measured peak."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autoconfig.machine import Machine
from autoconfig.models.matmul import choose
from autoconfig.profile import load_profile, profile_from_dict, profile_to_dict
from kernels.matmul import MatmulShape
from kernels.target import get_target

PROFILES = Path(__file__).resolve().parent.parent / "hwprofiles"
ZEN4 = PROFILES / "amd-epyc-zen4-avx512.yaml"  # probed: per-width L1 load rates
DATASHEET = PROFILES / "intel-xeon-platinum-8380.yaml"  # none


def test_load_rates_come_from_the_probe_per_width() -> None:
    profile = load_profile(ZEN4)
    machine = Machine.of(profile)
    rates = {f.lanes: float(f.loads) for f in profile.fma}
    assert machine.at(16, 1).vector_loads_per_ns() == rates[16]
    assert machine.at(8, 1).vector_loads_per_ns() == rates[8]
    assert machine.at(16, 1).broadcast_loads_per_ns() == rates[4]  # the narrowest width's


def test_without_per_width_figures_loads_count_instructions_at_the_widest_bandwidth() -> None:
    profile = load_profile(DATASHEET)
    assert all(f.loads is None for f in profile.fma)
    machine = Machine.of(profile)
    l1 = float(profile.bandwidth.single_thread.levels["L1"])
    widest = profile.widest_fma().lanes
    for lanes in machine.fma_by_lanes:
        assert machine.at(lanes, 1).vector_loads_per_ns() == pytest.approx(l1 / (widest * 4))


def test_profiles_without_load_figures_still_load_and_round_trip() -> None:
    data = profile_to_dict(load_profile(ZEN4))
    for entry in data["fma"]:
        del entry["loads"]
    profile = profile_from_dict(data)
    assert all(f.loads is None for f in profile.fma)
    assert profile_from_dict(profile_to_dict(profile)) == profile


def test_peak_is_the_best_width_per_thread_count() -> None:
    profile = load_profile(ZEN4)
    machine = Machine.of(profile)
    assert machine.peak_gflops(1) == max(f.peak_gflops for f in profile.fma)
    assert machine.peak_gflops(int(profile.threads)) == pytest.approx(max(f.peak_gflops_all for f in profile.fma))
    # never above as many single cores, even where the all-thread figure says so
    fma = tuple(dataclasses.replace(f, throughput_all=dataclasses.replace(f.throughput_all, value=1e3))
                for f in profile.fma)  # fmt: skip
    inflated = Machine.of(dataclasses.replace(profile, fma=fma))
    assert inflated.peak_gflops(2) == pytest.approx(2 * machine.peak_gflops(1))


def test_ties_go_to_fewer_instructions_per_flop() -> None:
    # with M=4, 256-bit 4x6 tiles (10 loads per 24 FMAs) and 512-bit 4x3 (7 per 12)
    # predict the same FMA-bound time; per flop the 512-bit tile loads less (measured
    # 10% faster on Zen 4)
    pick = choose(MatmulShape(4, 512, 512), load_profile(ZEN4), get_target("avx512"), threads=1).best.config
    assert pick.lanes == 16


XEON = PROFILES / "intel-xeon-model167-avx512.yaml"  # reports 480 MiB of L3; bandwidth falls past 68 MB


def test_caches_hold_what_the_probe_measured_not_what_they_report() -> None:
    profile = load_profile(XEON)
    machine = Machine.of(profile)
    knees = profile.bandwidth.single_thread.knees
    capacity = dict(machine.capacities(True))
    assert capacity["L3"] <= float(knees["L3"]) < int(profile.cache(3).size) / 4
    assert machine.holding_level(411e6, whole_problem=True) == "DRAM"  # VGG-16's fc6 weights
    assert capacity["L2"] <= int(profile.cache(2).size)


def test_a_models_weights_come_from_dram_when_they_outgrow_the_l3() -> None:
    machine = Machine.of(load_profile(XEON))
    assert machine.constants_at(37.7e6) == "L3"  # a layer called again and again
    assert machine.in_model(20_000_000).constants_at(37.7e6) == "L3"  # MobileNet-sized weights stay
    assert machine.in_model(528_000_000).constants_at(37.7e6) == "DRAM"  # VGG-16's do not
    assert machine.in_model(528_000_000).at(16, 2).constants_level == "DRAM"


def test_a_pass_over_a_models_weights_reads_at_the_curves_bandwidth_for_all_of_them() -> None:
    """Inside a model, a kernel that copies its weights in a pass of its own reads them
    at the probe's bandwidth for a working set of all the model's constants (between two
    of its points, linear in the size's log), its threads sharing the total; alone, from
    the level that holds them."""
    profile = load_profile(ZEN4)
    machine = Machine.of(profile)
    def points(curve):
        return [(float(p.working_set), float(p.bandwidth)) for p in curve[-12:-10]]

    (s0, b0), (s1, b1) = points(profile.bandwidth.single_thread.curve)
    between = int((s0 * s1) ** 0.5)
    one = machine.in_model(between)
    assert 1e6 / one.constants_read_ns(1e6) == pytest.approx((b0 + b1) / 2)
    (a0, t0), (a1, t1) = points(profile.bandwidth.all_threads.curve)
    assert (a0, a1) == (s0, s1)
    two = one.at(16, profile.bandwidth.all_threads.threads)
    assert 1e6 / two.constants_read_ns(1e6) == pytest.approx((t0 + t1) / 2 / two.threads)
    assert machine.in_model(0).constants_read_ns(1e6) == machine.traffic_ns(1e6)


def test_broadcast_loads_come_from_the_probe_where_it_measured_them() -> None:
    profile = load_profile(XEON)
    machine = Machine.of(profile)
    for figures in profile.fma:
        assert machine.at(figures.lanes, 1).broadcast_loads_per_ns() == float(figures.broadcasts)
    assert float(profile.widest_fma().broadcasts) < float(min(profile.fma, key=lambda f: f.lanes).loads)
