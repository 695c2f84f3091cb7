"""What people read: runtimes formatted in the .md/.tex/.html tables; the figures' reading aids (prompts as typed,
panels in size order, coinciding curves named, zero gains shown)."""

import json

import numpy as np
from PIL import Image

from pit.reporting.figures import coincident_arms, panel_order, prompt_title, side_effects
from pit.reporting.tables import format_duration, runtime_seconds


def test_runtimes_are_seconds_in_csv_and_read_as_durations():
    assert runtime_seconds("1h 24m") == 5040.0 and runtime_seconds("0m 09s") == 9.0 and runtime_seconds(None) is None
    shown = [format_duration(s) for s in (7.34, 9.0, 42.4, 90.0, 599.6, 5040.0, 13779.0, float("nan"), None)]
    assert shown == ["7.3s", "9s", "42s", "1m 30s", "10m 00s", "1h 24m", "3h 50m", "", ""]


def test_prompt_titles_are_unescaped_wrapped_and_short():
    title = prompt_title("def main(argv=None):\n    parser = argparse." + " word" * 40)
    assert title.startswith("prompt: def main(argv=None):\u21b5 \u2423\u2423\u2423\u2423parser = argparse.")
    assert "\\n" not in title and "'" not in title
    lines = title.split("\n")
    assert len(lines) == 3 and lines[-1].endswith(" ...") and all(len(line) <= 80 for line in lines)


def test_panels_sort_by_size_and_identical_curves_are_named():
    slots = sorted(["1.3b", "256m", "590m"], key=lambda s: panel_order("teacher", s, None))
    assert slots == ["256m", "590m", "1.3b"]
    assert panel_order("teacher", "1.3b", "mbpp") < panel_order("scratch", "303m", "mbpp")
    curve = [(1, 4.0), (2, 3.5)]
    curves = {"tt": curve, "untied": [(1, 4.0), (2, 3.5 + 1e-6)], "pit": [(1, 10.0), (2, 9.9)]}
    assert coincident_arms(curves) == [("tt", "untied")]


def test_side_effects_figure_shows_points_when_every_gain_is_zero(tmp_path):
    for kind, kl in (("pit", 1e-5), ("tt", 0.02)):
        run = tmp_path / "runs" / "teacher" / "256m" / kind / "mbpp"
        for sub in ("eval", "base"):
            (run / sub).mkdir(parents=True)
            result = {"task": "mbpp", "pass@1": 0.0, "n": 2, "passed": 0, "standin": False}  # no NLL: score gains
            (run / sub / "mbpp.json").write_text(json.dumps(result))
        fx = {"kl": kl, "val_loss_change": kl / 2, "embedding_change": 0.0, "head_change": 0.0}
        (run / "side_effects.json").write_text(json.dumps(fx))
    out = tmp_path / "side_effects.png"
    side_effects(tmp_path / "runs", out, "test")
    image = np.asarray(Image.open(out).convert("RGB")).astype(int)
    orange = (abs(image[..., 0] - 255) < 40) & (abs(image[..., 1] - 127) < 40) & (image[..., 2] < 60)
    assert orange.sum() > 20, "the TT points (orange) are not drawn"
