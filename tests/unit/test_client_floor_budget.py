"""What the client-floor comparison derives from the responder's cost curve
(bench/client_floor.py): the per-request cost at which a broker falls to a share of the
floor, interpolated between the measured costs around it."""

from __future__ import annotations

import pytest

from bench.client_floor import cost_for_share, main


def test_the_cost_at_a_share_is_interpolated_between_the_costs_around_it():
    rates = {0: 700.0, 20: 650.0, 40: 610.0, 60: 570.0}
    assert cost_for_share(0.9, rates, 700.0) == pytest.approx(30.0)  # 630 txn/s lies halfway from 20 to 40
    assert cost_for_share(1.0, rates, 700.0) == 0.0


def test_a_share_the_costs_do_not_bracket_has_no_cost():
    assert cost_for_share(0.5, {0: 700.0, 20: 660.0, 40: 620.0}, 700.0) is None  # 350 is below every rate
    assert cost_for_share(0.9, {0: 700.0}, 700.0) is None


@pytest.mark.parametrize("costs", ["20,x", "0", "-5"])
def test_costs_that_are_not_whole_positive_microseconds_are_refused(costs, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--cost-us", costs])
    assert exited.value.code == 2
    assert "--cost-us" in capsys.readouterr().err
