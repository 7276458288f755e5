"""The table of held-out ledger residuals that ``dlsched plan``'s intervals read
(``job.envelope``): one entry per priced, scored ledger metric that is held out (the same
predictions ``dlsched validate`` scores and ``ledger.score`` calibrates its intervals on), with
the features of the run and, for a time metric, its published MFU.

``python -m dlsched.ledger.residuals`` writes the bundled table (``--out FILE`` elsewhere);
tests/job/test_intervals.py holds the bundled table to ``residuals()`` at the current commit.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from dlsched.errors import ConfigError
from dlsched.job.envelope import TABLE, Residual, dump_residuals, features
from dlsched.job.evaluation.evaluate import evaluate
from dlsched.ledger import load_ledger
from dlsched.ledger.predict import Prediction, job_and_layout, predict_rows

DIGITS = 6
"""Significant digits kept of an error and an MFU: a change that moves a prediction by more
than one part in a million changes the table; round-off (an order of operations) does not."""
HEADER = """\
# The ledger's held-out residuals with the features of each run (dlsched.job.envelope):
# written by `python -m dlsched.ledger.residuals` from the predictions `dlsched validate`
# makes; do not edit. Regenerate it whenever a change moves a ledger prediction
# (tests/job/test_intervals.py fails until then).
"""


def _time_error(prediction: Prediction) -> float:
    """The iteration time's error of a time-family prediction (a rate's ``e`` -> ``1 / (1 +
    e) - 1``)."""
    error = prediction.error or 0.0
    return error if prediction.metric == "iteration_s" else 1 / (1 + error) - 1


def _rounded(value: float) -> float:
    """``value`` to ``DIGITS`` significant digits."""
    return float(f"{value:.{DIGITS}g}")


def residual(prediction: Prediction) -> Residual:
    """The residual of a priced, scored, held-out prediction (module docstring)."""
    job, layout = job_and_layout(prediction.row)
    if prediction.family == "memory":
        return Residual(prediction.row.id, "memory", _rounded(prediction.error or 0.0), None,
                        features(job, layout))
    error = _time_error(prediction)
    mfu = evaluate(job, layout).mfu * (1 + error)
    return Residual(prediction.row.id, "time", _rounded(error), _rounded(mfu),
                    features(job, layout))


def residuals(predictions: Sequence[Prediction] | None = None) -> list[Residual]:
    """The residuals of ``predictions`` (default: the whole ledger's), in ledger order."""
    chosen = predict_rows(load_ledger()) if predictions is None else predictions
    return [residual(p) for p in chosen
            if p.scored and p.held_out and p.predicted is not None]


def table_text() -> str:
    """The table's text at the current commit."""
    return dump_residuals(residuals(), HEADER)


def main(argv: Sequence[str] | None = None) -> None:
    """Write the table (the bundled file unless ``--out``)."""
    parser = argparse.ArgumentParser(prog="python -m dlsched.ledger.residuals",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write here instead")
    args = parser.parse_args(argv)
    path = args.out or Path(str(resources.files("dlsched").joinpath(TABLE)))
    if path.suffix not in (".yaml", ".yml"):
        raise ConfigError(f"--out: {path} is not accepted; accepted: a .yaml file")
    path.write_text(table_text())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
