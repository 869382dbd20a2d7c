"""`nonstop tolerance`: a world's stochasticity over the inference horizon (Eq. 4's p_minimax**k),
measured from copies of the env, checked against the cycle MDP's exact answer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nonstop.studies.tolerance import cycle_mode_probability, estimate_predictability, tolerable_delay


@pytest.mark.parametrize("n,p", [(64, 0.9), (64, 0.6), (4, 0.5)])
def test_cycle_mdp_matches_the_exact_mode_probability(n, p):
    est = estimate_predictability(
        "theory/delay-cycle", env_kwargs={"n": n, "p_minimax": p}, horizon=6, starts=30, flock=64, seed=1
    )
    exact = np.array([cycle_mode_probability(n, p, k) for k in range(1, 7)])
    # the mode of 64 copies is biased up by at most a few hundredths where two states nearly tie
    assert np.all(np.abs(est.q - exact) < 4 * est.stderr + 0.05), (est.q, exact)
    assert abs(est.q[0] - max(p, 1 - p)) < 0.05  # one step: p_minimax itself (or moving, if likelier)


def test_deterministic_worlds_tolerate_any_delay_and_stochastic_ones_do_not():
    cart = estimate_predictability("CartPole", horizon=10, starts=5, flock=4)
    assert np.all(cart.q == 1.0) and tolerable_delay(cart, 0.0) == 10
    ice = estimate_predictability("FrozenLake-v1", horizon=4, starts=20, flock=32)
    dry = estimate_predictability("FrozenLake-v1", env_kwargs={"is_slippery": False}, horizon=4, starts=5, flock=8)
    assert ice.q[0] < 0.75 and tolerable_delay(ice, 0.05) == 0  # slippery ice: a third of moves go astray
    assert np.all(dry.q == 1.0)
    assert tolerable_delay(ice, 1.0) == 4


def test_bad_input_and_emulators_are_refused():
    with pytest.raises(ValueError, match="emulator"):
        estimate_predictability("Boxing", horizon=2, starts=1, flock=2)
    with pytest.raises(ValueError, match="seat world"):
        estimate_predictability("multi/duel", horizon=2, starts=1, flock=2)
    with pytest.raises(ValueError, match="flock must be at least 2"):
        estimate_predictability("CartPole", flock=1)
    with pytest.raises(ValueError, match="horizon must be a positive integer"):
        estimate_predictability("CartPole", horizon=0)
    with pytest.raises(ValueError, match="unknown environment id"):
        estimate_predictability("NoSuchWorld")


def test_tolerance_command(capsys):
    from nonstop.cli import main

    rc = main(
        [
            "tolerance",
            "--env",
            "theory/delay-cycle",
            "--env-arg",
            "n=64",
            "--env-arg",
            "p_minimax=0.99",
            "--horizon",
            "12",
            "--starts",
            "10",
            "--flock",
            "32",
            "--max-regret",
            "0.06",
            "--json",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # 1 − 0.99**k ≤ 0.06 up to k = 6: the estimate lands within a step of it
    assert 4 <= out["tolerable_delay_steps"] <= 8, out
    assert abs(out["p_minimax_hat"] - 0.99) < 0.03
    assert main(["tolerance", "--env", "CartPole", "--max-regret", "2"]) == 2
    assert "--max-regret must be a fraction" in capsys.readouterr().err


def test_module_doctests():
    import doctest

    from nonstop.studies import tolerance

    failures, tried = doctest.testmod(tolerance, verbose=False, report=False)
    assert tried >= 4 and failures == 0
