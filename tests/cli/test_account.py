"""`dpcurator account` end to end, as a user runs it (a real subprocess)."""

import json
import subprocess
import sys

import pytest

from dpcurator.cli import main

METHOD_KEYS = {"basic", "advanced", "kov", "optimal", "pld", "zcdp", "gdp", "clt"}


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "dpcurator.cli", "account", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_json_contract():
    p = run("--delta", "1e-5", "--json", "pure:0.1x100")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out) == {"delta", "mechanisms", "methods", "best"}
    assert out["delta"] == 1e-05
    assert out["mechanisms"] == [{"spec": "pure:0.1", "count": 100}]
    assert set(out["methods"]) == METHOD_KEYS
    for r in out["methods"].values():
        assert set(r) == {"epsilon", "delta", "rigorous", "theorem"}
    assert out["methods"]["basic"]["epsilon"] == pytest.approx(10.0)
    assert out["methods"]["clt"]["rigorous"] is False
    assert out["best"]["method"] == "optimal"
    assert round(out["best"]["epsilon"], 4) == 4.3068


def test_json_epsilon_target_names_smallest_rigorous_delta():
    p = run("--epsilon", "3", "--json", "pure:0.1x100", "laplace:10x5")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["epsilon"] == 3.0 and "delta" not in out
    rigorous = {k: v["delta"] for k, v in out["methods"].items() if v["rigorous"]}
    assert out["best"]["delta"] == min(rigorous.values())
    assert out["methods"][out["best"]["method"]]["delta"] == out["best"]["delta"]
    # laplace:10 is 0.1-DP like pure:0.1, so the optimal theorem applies to the mix, and
    # the PLD, which knows the Laplace mechanism exactly, beats it.
    assert out["methods"]["pld"]["delta"] < out["methods"]["optimal"]["delta"]


def test_gaussian_mixture_leaves_out_methods_that_do_not_apply():
    p = run("--json", "--delta", "1e-5", "pure:0.1x100", "gaussian:20x10")
    out = json.loads(p.stdout)
    assert set(out["methods"]) == {"pld", "zcdp", "gdp", "clt"}
    assert out["mechanisms"][1] == {"spec": "gaussian:20", "count": 10}


def test_table_marks_best_row(capsys):
    assert main(["account", "--delta", "1e-5", "pure:0.1x100"]) == 0
    out = capsys.readouterr().out
    best = [line for line in out.splitlines() if line.startswith("*  ")]
    assert len(best) == 1 and "optimal" in best[0]
    assert "best rigorous: optimal" in out
    assert "no (approx.)" in out  # the clt row


def test_plot_writes_png(tmp_path):
    path = tmp_path / "curves.png"
    assert main(["account", "--plot", str(path), "pure:0.5x10", "dgaussian:3x4"]) == 0
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


@pytest.mark.parametrize(
    "args",
    [
        ["foo:1"],
        ["pure:-1"],
        ["pure:0"],
        ["pure:nan"],
        ["gaussian:inf"],
        ["pure:1x0"],
        ["pure:1x2.5"],
        ["pure"],
        ["approx:1"],
        ["approx:1,1"],
        ["--delta", "-1", "pure:1"],
        ["--delta", "1.5", "pure:1"],
        ["--delta", "nan", "pure:1"],
        ["--epsilon", "-1", "pure:1"],
        ["--delta", "1e-5", "--epsilon", "1", "pure:1"],
        [],
    ],
)
def test_bad_input_is_one_line_exit_2(args, capsys):
    with pytest.raises(SystemExit) as exit_:
        raise SystemExit(main(["account", *args]))
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 or lines[0].startswith("usage:"), captured.err
    assert "error" in lines[-1]
    assert captured.out == ""


def test_bad_spec_in_a_real_process_has_no_traceback():
    p = run("--json", "pure:1", "gaussian:-3")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert "gaussian:-3" in p.stderr and p.stdout == ""


def test_epsilon_mode_at_10_to_the_5_runs_does_not_crash(capsys):
    # used to end in an OverflowError traceback (basic's delta)
    assert main(["account", "--epsilon", "17.8559", "--json", "pure:0.01x100000"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["methods"]["optimal"]["delta"] >= 1e-5
    assert out["best"]["method"] == "optimal"


@pytest.mark.parametrize(
    "args",
    [
        ["--delta", "5e-324", "pure:1"],
        ["--delta", "1e-5", "pure:5e-324"],
        ["--delta", "1e-5", "pure:1e300"],
        ["--delta", "1e-5", "pure:1e400"],
        ["--delta", "1e-5", "pure:1x100000000000000000000"],
        ["--delta", "1e-5", "pure:700x10"],
        ["--epsilon", "1e300", "pure:1"],
        ["--epsilon", "1e400", "pure:1"],
        ["--epsilon", "5e-324", "pure:1"],
        ["--delta", "1e-5", "gaussian:5e-324"],
        ["--delta", "1e-5", "gaussian:1e300"],
        ["--delta", "1e-5", "gdp:1e300"],
        ["--delta", "1e-5", "zcdp:1e300"],
        ["--delta", "1e-5", "zcdp:5e-324"],
        ["--delta", "1e-5", "approx:1,0.99999999"],
        ["--delta", "0.999999999", "pure:1"],
        ["--delta", "1e-5", "dgaussian:1e-300"],
        ["--delta", "1e-5", "dgaussian:1e300"],
        ["--delta", "1e-5", "laplace:5e-324"],
        ["--delta", "1e-5", "approx:1,5e-324x1000"],
        ["--epsilon", "1e300", "gaussian:1"],
        ["--delta", "1", "pure:1"],
        ["--delta", "0", "pure:1"],
        ["--epsilon", "inf", "pure:1"],
    ],
)
def test_extreme_input_is_a_table_or_one_line(args, capsys):
    with pytest.raises(SystemExit) as exit_:
        raise SystemExit(main(["account", *args]))
    captured = capsys.readouterr()
    assert exit_.value.code in (0, 2), captured.err
    if exit_.value.code == 2:
        assert len(captured.err.strip().splitlines()) == 1 and "error" in captured.err
        assert captured.out == ""
    else:
        assert captured.err == ""
        assert "Traceback" not in captured.out


def test_table_rounds_rigorous_figures_up(capsys):
    from dpcurator.privacy.composition import fmt_up

    assert fmt_up(4.306791372516508) == "4.3068"  # to nearest it would be 4.30679 < the bound
    assert fmt_up(1.2345651) == "1.23457" and fmt_up(1e-05) == "1e-05"
    assert main(["account", "--delta", "1e-5", "pure:0.1x100"]) == 0
    out = capsys.readouterr().out
    assert "best rigorous: optimal, epsilon = 4.3068\n" in out


def _profile(pairs, at):
    """The exact privacy profile delta(at) of composing (eps_i, delta_i)-DP guarantees:
    the hockey-stick divergence of the product of their dominating pairs (Kairouz, Oh &
    Viswanath 2017, Thm 3.3: each is dominated by a four-outcome randomized response),
    summed at 60 digits over the outcomes whose privacy loss exceeds ``at`` (decided
    exactly from the integer losses, so no term that is 0 in theory adds rounding)."""
    import itertools
    from fractions import Fraction

    import mpmath

    mpmath.mp.dps = 60
    inf = float("inf")
    atoms = []
    for e, d in pairs:
        ee, dd = mpmath.mpf(e), mpmath.mpf(d)
        w = (1 - dd) / (1 + mpmath.exp(ee))
        atoms.append(
            [(dd, 0, inf), (w * mpmath.exp(ee), w, e), (w, w * mpmath.exp(ee), -e), (0, dd, -inf)]
        )
    total = mpmath.mpf(0)
    for combo in itertools.product(*atoms):
        loss = sum(x for _, _, x in combo)
        if loss != loss:  # both a P-only and a Q-only atom: P and Q are both 0 there
            continue
        if loss == inf or (loss != -inf and Fraction(loss) > Fraction(at)):
            p = mpmath.fprod(a for a, _, _ in combo)
            q = mpmath.fprod(b for _, b, _ in combo)
            total += p - mpmath.exp(mpmath.mpf(at)) * q
    return total


@pytest.mark.parametrize(
    "specs, target, eps, methods",
    [
        (["approx:1,0.1", "approx:2,0.2"], "0.28", 3.0, {"kov"}),
        (["approx:1,0.1x2"], "0.19", 2.0, {"kov", "optimal"}),
    ],
)
def test_a_target_met_with_equality_is_met(specs, target, eps, methods):
    """1 - prod(1 - delta_i) is the least delta of the composition at any epsilon; a
    target equal to it is met at sum eps (and not below it), read from the decimals as
    written: at most is enough."""
    p = run("--delta", target, "--json", *specs)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["best"]["epsilon"] == eps
    assert {m for m, r in out["methods"].items() if r["rigorous"]} == methods
    pairs = [(1, "0.1"), (2, "0.2")] if len(specs) == 2 else [(1, "0.1"), (1, "0.1")]
    import mpmath

    mpmath.mp.dps = 60
    assert _profile(pairs, eps) <= mpmath.mpf(target)  # holds at 60 digits, no tolerance
    assert _profile(pairs, eps - 1e-9) > mpmath.mpf(target)  # and nothing smaller does


def test_a_target_just_below_the_floor_is_refused_in_one_line():
    p = run("--delta", "0.2799999", "approx:1,0.1", "approx:2,0.2")
    assert p.returncode == 0 and "exceeds the target delta = 0.2799999" in p.stdout


def test_floats_keep_their_pessimistic_reading():
    """A float delta may be its binary value, 0.1000000000000000055...; composed in
    Python with floats, the floor is then above the decimal target 0.28."""
    from dpcurator import ApproxDP, compose

    r = compose([ApproxDP(1.0, 0.1), ApproxDP(2.0, 0.2)], delta=0.28)
    assert not any(m.rigorous for m in r.methods.values())
    from dpcurator.privacy._rigor import Written

    r = compose(
        [ApproxDP(1.0, Written("0.1")), ApproxDP(2.0, Written("0.2"))], delta=Written("0.28")
    )
    assert r.methods["kov"].epsilon == 3.0


@pytest.mark.parametrize(
    "args, says",
    [
        (["approx:1,1e-99999999999"], "delta must be a finite number > 0"),
        (["approx:1,0." + "1" * 500], "too many digits or too large an exponent"),
        (["--delta", "1e-20000000", "pure:1"], "invalid number value"),
    ],
)
def test_hostile_numbers_are_refused_at_once(args, says):
    """A decimal is read exactly, but never one whose exact value would be a huge
    integer: such text is refused in one line, at once."""
    p = run(*args)
    assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args, code",
    [
        (["--delta", "1e400", "pure:1"], 2),
        (["--epsilon", "1e400", "pure:1"], 2),
        (["pure:1e400"], 2),
        (["--delta", "5e-324", "pure:1"], 0),
        (["pure:5e-324x3"], 0),
        (["--delta", "-0", "approx:1," + "9" * 300], 2),
    ],
)
def test_extremes_as_written(args, code):
    """The smallest and beyond-the-largest floats, written as text: read exactly or
    refused in one line, never a traceback."""
    p = run(*args)
    assert p.returncode == code, p.stderr
    if code:
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
