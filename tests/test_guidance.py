"""The advice lines: each verdict other than a plain ok, and each failed check, says what it means and what next."""

from __future__ import annotations

from benchfill.diagnostics.guidance import CHECK_ADVICE, check_advice, verdict_advice
from benchfill.diagnostics.metrics import FLAG_DDM, FLAG_MAX_GAP, FLAG_TOP5

THRESHOLDS = {"ddm": FLAG_DDM, "max_gap": FLAG_MAX_GAP, "top5_sum": FLAG_TOP5}
OK = {"ddm": "ok", "max_gap": "ok", "top5_sum": "ok"}


def test_plain_ok_verdicts_with_clear_intervals_say_nothing():
    intervals = {"ddm": (0.02, 0.05), "max_gap": (0.03, 0.06), "top5_sum": (0.1, 0.2)}
    assert verdict_advice(OK, THRESHOLDS, intervals, top_gap_beyond_reach=False) == []
    assert verdict_advice(OK, THRESHOLDS, None, top_gap_beyond_reach=True) == []


def test_a_flag_says_what_to_run_and_a_straddling_interval_is_borderline():
    verdicts = {**OK, "max_gap": "flag"}
    clear = verdict_advice(verdicts, THRESHOLDS, {"max_gap": (0.12, 0.2)}, top_gap_beyond_reach=False)
    assert len(clear) == 1 and clear[0].startswith("max gap flag") and "benchfill fill" in clear[0]
    edge = verdict_advice(verdicts, THRESHOLDS, {"max_gap": (0.09, 0.12)}, top_gap_beyond_reach=False)
    assert len(edge) == 2 and "borderline" in edge[1] and "[0.090, 0.120]" in edge[1]
    ok_edge = verdict_advice(OK, THRESHOLDS, {"ddm": (0.08, 0.11)}, top_gap_beyond_reach=False)
    assert ok_edge == ["DDM ok, but borderline: its 90 % interval [0.080, 0.110] contains the threshold 0.1"]


def test_a_max_gap_flag_at_items_beyond_reach_asks_for_other_models_and_at_floor_for_more_answers():
    reach = verdict_advice({**OK, "max_gap": "flag"}, THRESHOLDS, None, top_gap_beyond_reach=True)
    assert len(reach) == 1 and "no model solved" in reach[0] and "stronger" in reach[0]
    floor = verdict_advice({**OK, "top5_sum": "at floor"}, THRESHOLDS, None, top_gap_beyond_reach=False)
    assert len(floor) == 1 and floor[0].startswith("Top-5 gap sum at floor") and "more rollouts" in floor[0]


def test_every_check_has_advice_and_only_failed_ones_are_listed():
    assert set(CHECK_ADVICE) == {"R1", "R2", "R3", "R4", "M1", "M2", "M3", "M4"}
    assert check_advice(["R3", "M1"]) == [CHECK_ADVICE["R3"], CHECK_ADVICE["M1"]]
    assert check_advice([]) == []
