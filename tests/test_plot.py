"""The trainer's loss-curve PNG (torchtpu/trainer/plot.py), drawn by matplotlib
(issue 42): the file is a width x height RGB PNG that matplotlib made, and
the curve drawn in it follows the losses given (read back from the pixels:
the curve's height in each column against the data's own ordering), with
non-finite losses left out."""
import math

import numpy as np
import pytest

from torchtpu.trainer import metrics
from torchtpu.trainer.plot import LINE, loss_curve_png

Image = pytest.importorskip("PIL.Image")


def _read(path):
    img = Image.open(path)
    img.load()
    return img


def _curve_rows(img):
    """For each pixel column, the mean row of the curve's colour (None where
    the column has none)."""
    rgb = np.asarray(img.convert("RGB")).astype(int)
    target = np.array([int(LINE[i:i + 2], 16) for i in (1, 3, 5)])
    near = np.abs(rgb - target).sum(axis=2) < 60
    rows = np.arange(rgb.shape[0])[:, None]
    counts = near.sum(axis=0)
    mean = (near * rows).sum(axis=0) / np.maximum(counts, 1)
    return [m if c else None for m, c in zip(mean, counts)]


def test_loss_curve_png_follows_the_losses(tmp_path):
    steps = list(range(1, 61))
    falling = [4.0 * math.exp(-s / 15) + 0.5 for s in steps]
    path = loss_curve_png(str(tmp_path / "loss.png"), steps, falling)
    img = _read(path)
    assert (img.format, img.mode, img.size) == ("PNG", "RGB", (640, 400))
    assert img.info["Software"].startswith("Matplotlib version")
    cols = [(x, y) for x, y in enumerate(_curve_rows(img)) if y is not None]
    assert len(cols) > 300  # the curve spans most of the width
    # Image rows grow downwards: a falling loss climbs down the image, as the
    # data does between any two steps far enough apart to be told apart.
    ys = [y for _, y in cols]
    assert ys[0] < ys[len(ys) // 2] < ys[-1]
    # Its first third falls more than its last, as the exponential does.
    third = len(ys) // 3
    assert ys[third] - ys[0] > 3 * (ys[-1] - ys[-third])

    rising = [-v for v in falling]
    img = _read(loss_curve_png(str(tmp_path / "rising.png"), steps, rising, 800, 300))
    assert img.size == (800, 300)
    ys = [y for y in _curve_rows(img) if y is not None]
    assert ys[0] > ys[len(ys) // 2] > ys[-1]


def test_loss_curve_png_skips_non_finite_and_empty(tmp_path):
    steps = [1, 2, 3, 4]
    with_nan = loss_curve_png(str(tmp_path / "nan.png"), steps, [3.0, float("nan"), 2.0, 1.0])
    without = loss_curve_png(str(tmp_path / "without.png"), [1, 3, 4], [3.0, 2.0, 1.0])
    assert np.array_equal(np.asarray(_read(with_nan)), np.asarray(_read(without)))
    empty = _read(loss_curve_png(str(tmp_path / "empty.png"), [], []))
    assert empty.size == (640, 400)
    assert all(y is None for y in _curve_rows(empty))


def test_tensorboard_on_by_default_when_installed(tmp_path):
    """"auto" (the trainer's default to be) writes the scalars when
    tensorboard is installed; false writes nothing; the event file holds
    the values logged (read back with tensorboard's own reader)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    lines = []
    tb = metrics.TensorBoard("auto", str(tmp_path / "tb"), lines.append)
    assert tb.writer is not None and "TensorBoard scalars" in lines[0]
    for step, loss in ((1, 2.5), (2, 1.25)):
        tb.add(step, {"loss": loss})
    tb.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(1, 2.5), (2, 1.25)]

    for off in (False, "false"):
        assert metrics.TensorBoard(off, str(tmp_path / "off"), lines.append).writer is None
    with pytest.raises(ValueError, match="enable_tensorboard"):
        metrics.TensorBoard("sometimes", str(tmp_path / "x"), lines.append)


def test_tensorboard_setting_in_the_trainer_config():
    """The trainer's default is "auto"; TOML booleans, a bare flag and
    true/false/auto on the command line are accepted, anything else refused."""
    from torchtpu.trainer import config

    assert config.load_config()["metrics"]["enable_tensorboard"] == "auto"
    cfg = config.load_config(overrides={"metrics": {"enable_tensorboard": False}})
    assert cfg["metrics"]["enable_tensorboard"] == "false"
    cfg = config.load_config(argv=["--metrics.enable_tensorboard"])
    assert cfg["metrics"]["enable_tensorboard"] == "true"
    cfg = config.load_config(argv=["--metrics.enable_tensorboard", "auto"])
    assert cfg["metrics"]["enable_tensorboard"] == "auto"
    with pytest.raises(config.ConfigError, match="enable_tensorboard.*true, false or auto"):
        config.load_config(argv=["--metrics.enable_tensorboard", "sometimes"])
