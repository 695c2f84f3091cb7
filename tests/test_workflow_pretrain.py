"""The pipeline through Snakemake on a reduced default profile (one teacher slot with a stand-in
teacher, one scratch slot, PIT and TT): pretraining, diagnostics, LoRA post-training of the teacher
slot's runs on MBPP with evaluation, tables, figures, report. The results are those of the run the
end-to-end tests share (tests/helpers.py: a temporary project, killed once and resumed)."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest
import torch
import yaml
from helpers import DEFAULT_CONFIG, PAPER_CONFIG, ROOT, job_counts, snakemake, wait_for
from tolerances import interface_bound, relative_bound, run_bound, within

from pit.models.checkpoint import load_model

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pipeline")]  # one worker builds the shared run


class DevTools:
    """Headless Chromium driven over --remote-debugging-pipe (the DevTools protocol on fds 3 and 4; stdlib only)."""

    def __init__(self, chromium: str, flags: list[str], url: str):
        import os
        import subprocess

        to_child, self._write = os.pipe()
        self._read, from_child = os.pipe()

        def child_fds():  # fds 3 and 4 in the child, inheritable (os.pipe's are close-on-exec)
            a, b = os.dup(to_child), os.dup(from_child)
            os.dup2(a, 3)
            os.dup2(b, 4)

        cmd = [chromium, *flags, "--remote-debugging-pipe", url]
        self.proc = subprocess.Popen(
            cmd, close_fds=False, preexec_fn=child_fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        os.close(to_child)
        os.close(from_child)
        self._buf, self._id = b"", 0
        page = next(t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        import os

        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        os.write(self._write, json.dumps(message | ({"sessionId": session} if session else {})).encode() + b"\0")
        while True:  # events and replies, each ending in NUL, until the reply to this message
            while b"\0" not in self._buf:
                chunk = os.read(self._read, 1 << 16)
                assert chunk, f"Chromium closed the DevTools pipe during {method}"
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                assert "error" not in reply, (method, reply["error"])
                return reply["result"]

    def js(self, expression: str, context: int | None = None):
        params = {"expression": expression, "returnByValue": True} | ({"contextId": context} if context else {})
        return self.send("Runtime.evaluate", params, self.session)["result"].get("value")

    def wait(self, fn, what: str, timeout: float = 30.0):
        return wait_for(fn, timeout, what)

    def frame_text(self) -> str | None:
        """The text of the page's first child frame (an iframe with a data: URL: read in its own world)."""
        for child in self.send("Page.getFrameTree", {}, self.session)["frameTree"].get("childFrames", []):
            world = self.send("Page.createIsolatedWorld", {"frameId": child["frame"]["id"]}, self.session)
            return self.js("document.body ? document.body.innerText : ''", world["executionContextId"])
        return None

    def close(self):
        self.proc.kill()
        self.proc.wait()


def report_entry_text(chromium: str, flags: list[str], url: str, entry: str, category: str = "Tables") -> str:
    """Open the Snakemake report, go to `category`, click the eye of `entry`'s row and return the text of what
    opened (the report shows HTML results in an iframe)."""
    browser = DevTools(chromium, flags, url)
    try:
        click = f"[...document.querySelectorAll('a')].find(a => a.textContent.trim() === {json.dumps(category)})"
        browser.wait(lambda: browser.js(f"(a => a && (a.click(), true))({click})"), f"the {category} category")
        row = f"[...document.querySelectorAll('tr')].find(r => r.textContent.trim() === {json.dumps(entry)})"
        browser.wait(
            lambda: browser.js(f"(r => r && (r.querySelector('a[iconname=eye]').click(), true))({row})"), entry
        )
        browser.wait(lambda: browser.js("(document.querySelector('iframe') || {}).src"), "the table's frame")
        return browser.wait(browser.frame_text, "the table's text")
    finally:
        browser.close()


@pytest.fixture(scope="module")
def pipeline(pipeline_project):
    return pipeline_project.root


def test_every_arm_has_a_run_folder_and_pit_stays_consistent(pipeline):
    workdir = pipeline
    for mode, slot in (("teacher", "256m"), ("scratch", "303m")):
        for kind in ("pit", "tt"):
            run = workdir / f"results/pretrain/{mode}/{slot}/{kind}"
            summary = json.loads((run / "summary.json").read_text())
            rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            assert len(rows) == 3 and summary["steps"] == 3
            if kind == "pit":  # the float32 bound at the run's d and kappa(T) (tests/tolerances.py)
                assert within(max(r["delta_ti"] for r in rows), run_bound(run), f"{mode} pit delta_ti")
            else:
                assert min(r["delta_ti"] for r in rows) > 0
            assert (run / "final" / "model.safetensors").is_file()
            spec = json.loads((run / "run.json").read_text())
            assert spec["run_name"] == f"{mode}-{slot}-{kind}"
    # the teacher arm pit-head: PIT with the head-keeping init, consistent, and it starts from the teacher's head
    head = workdir / "results/pretrain/teacher/256m/pit-head"
    spec = json.loads((head / "run.json").read_text())["params"]["train"]
    assert spec["interface"] == {**spec["interface"], "kind": "pit", "t_init": "power", "t_power": 1.0}
    logged = max(json.loads(x)["delta_ti"] for x in (head / "metrics.jsonl").read_text().splitlines())
    assert within(logged, run_bound(head), "pit-head delta_ti")
    first = {
        k: json.loads((head.parent / k / "summary.json").read_text())["first_step_loss"]
        for k in ("pit", "pit-head", "tt")
    }
    assert first["pit-head"] < first["pit"] and abs(first["pit-head"] - first["tt"]) < abs(first["pit"] - first["tt"])
    assert not (workdir / "results/posttrain/teacher/256m/pit-head").exists()  # not in posttrain.interfaces
    teacher_run = json.loads((workdir / "results/pretrain/teacher/256m/pit/run.json").read_text())
    assert teacher_run["params"]["train"]["model"] == "results/teachers/256m/final"
    assert (workdir / "results/teachers/256m/final/config.json").is_file()


def test_runs_are_in_the_project_mlflow_store(pipeline):
    import mlflow

    workdir = pipeline
    client = mlflow.MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("pit-default")
    names = sorted(r.info.run_name for r in client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'"))
    lora = [f"{stage}-mbpp-teacher-256m-{i}" for stage in ("eval", "lora") for i in ("pit", "tt")]
    assert names == sorted(
        lora
        + [
            "scratch-303m-pit",
            "scratch-303m-tt",
            "stand-in-teacher-256m",
            "summary-default",
            "teacher-256m-pit",
            "teacher-256m-pit-head",
            "teacher-256m-tt",
        ]
    )


def test_job_logs_hold_plain_lines_and_no_carriage_return(pipeline):
    """Every log of the default DAG's jobs is plain lines: no carriage-return bar (transformers' "Loading weights"
    and "Writing model shards", the hub's downloads, tqdm), and the long jobs' progress as lines."""
    logs = sorted(p for p in (pipeline / "results/logs").rglob("*") if p.is_file())
    assert len(logs) > 30 and {p.parent.name for p in logs} >= {"pretrain", "diagnostics", "posttrain", "report"}
    assert [str(p.relative_to(pipeline)) for p in logs if b"\r" in p.read_bytes()] == []
    diagnosis = (pipeline / "results/logs/diagnostics").glob("*.log")
    phases = ("pit diagnose: [3/4] layerwise consistency and logit lens", "pit diagnose: [4/4] best context-free model")
    assert all(all(phase in p.read_text() for phase in phases) for p in diagnosis)


def test_diagnostics_separate_pit_from_tt(pipeline):
    workdir = pipeline
    for mode, slot in (("teacher", "256m"), ("scratch", "303m")):
        pit = json.loads((workdir / f"results/diagnostics/{mode}/{slot}/pit/diagnostics.json").read_text())
        tt = json.loads((workdir / f"results/diagnostics/{mode}/{slot}/tt/diagnostics.json").read_text())
        # 0 in exact arithmetic; float32 E and W_out are off by the rounding of 3 d-term products, amplified by
        # kappa(T) (tests/tolerances.py): cosine distance is second order in it, Procrustes error and angle first order
        model = load_model(workdir / f"results/pretrain/{mode}/{slot}/pit/final")
        w = torch.linalg.eigvalsh(model.interface.transform().double())
        bound = relative_bound(model.interface.dim, 3, (w.max() / w.min()).item())
        assert all(within(abs(v), bound, f"{mode} raw {k}") for k, v in pit["raw"].items()), pit["raw"]
        assert tt["raw"]["cosine_distance"] > 1e-3 and tt["delta_ti"] > 1e-3
        assert abs(tt["polar"]["cosine_distance"]) < 1e-9  # TT's polar factors coincide


def test_tables_figures_and_report(pipeline):
    import pandas as pd
    from PIL import Image

    workdir = pipeline
    tables = sorted(t for t in (workdir / "results/tables").glob("*.csv") if not t.stem.endswith("_seeds"))
    names = ["claims", "table1", "table2", "table3", "table4_scores", "table4_side_effects"]
    assert [t.stem for t in tables] == sorted(names)
    seeds = pd.read_csv(workdir / "results/tables/claims_seeds.csv")  # every number the claims table rests on
    assert list(seeds.columns) == ["mode", "slot", "group", "lora", "arm", "seed", "metric", "value"] and len(seeds)
    for csv in tables:  # plain tables: the header row first, the documented columns, numbers as numbers
        table, sidecar = pd.read_csv(csv), json.loads(csv.with_suffix(".json").read_text())
        assert sidecar["profile"] == "default" and sidecar["caption"] and len(table) > 0, csv.name
        assert list(table.columns) == [c["name"] for c in sidecar["columns"]], csv.name
        for c in sidecar["columns"]:
            numeric, column = c["type"] == "number", table[c["name"]]
            empty_text = not numeric and column.isna().all()  # a text column with no entries reads back as NaN
            assert empty_text or numeric == (column.dtype.kind in "fiu"), (csv.name, c)
            assert not numeric or c["unit"] is not None, (csv.name, c)
        for suffix in (".md", ".tex", ".html"):
            assert "default" in csv.with_suffix(suffix).read_text(), (csv.name, suffix)
    table1 = pd.read_csv(workdir / "results/tables/table1.csv")
    assert table1["runtime_s"].dtype.kind == "f" and (table1["runtime_s"] > 0).all()
    assert table1["paper_runtime_s"].max() > 3600  # the paper's runtimes, '1h 24m' -> 5040 s
    assert {c["name"]: c["unit"] for c in json.loads((workdir / "results/tables/table1.json").read_text())["columns"]}[
        "runtime_s"
    ] == "seconds"
    for column in ("mode", "slot", "method", "first_loss", "val_loss"):
        assert column in table1.columns, column
    table2 = (workdir / "results/tables/table2.csv").read_text()
    assert "raw_cosine" in table2 and "polar_cosine" in table2 and "paper_cosine" in table2
    for png in (
        "figure3_scratch_loss",
        "figure4_teacher_loss",
        "interface_drift",
        "figure2_transition",
        "side_effects",
    ):
        image = Image.open(workdir / f"results/figures/{png}.png")
        assert image.size[0] > 300 and image.size[1] > 200
        assert len(np.unique(np.asarray(image.convert("L")))) > 20, f"{png} looks blank"
    table1 = (workdir / "results/tables/table1.csv").read_text()
    assert "PIT-head" in table1 and "first_loss" in table1 and "paper_runtime_s" in table1
    report = (workdir / "results/REPORT.md").read_text()
    assert "Table 1" in report and "Table 2" in report and "paper_train_loss" in report
    # what produced the numbers, and what they can be compared with
    assert "`gpt2-tiny` (a GPT-2 stand-in teacher pretrained by this pipeline; 2 layers, d = 64" in report
    vocab = json.loads((workdir / "results/pretrain/scratch/303m/tt/run.json").read_text())["params"]["vocab_size"]
    assert f"scratch slot 303m: `scratch-tiny` (trained from scratch; 2 layers, d = 64, V = {vocab:,}" in report
    assert "device cpu" in report and "only entries comparable with the paper" in report
    assert report.startswith("# PIT reproduction report: profile `default`\n\n## Summary\n")
    assert report.index("## Provenance") < report.index("## What was run") < report.index("## Table 1")
    assert "figures/figure3_scratch_loss.png" in report


def test_post_training_fills_table4_with_scores_gains_and_side_effects(pipeline):
    import pandas as pd

    workdir = pipeline
    assert sorted(p.name for p in (workdir / "results/posttrain").iterdir()) == ["teacher"]  # posttrain.modes
    for kind in ("pit", "tt"):
        run = workdir / f"results/posttrain/teacher/256m/{kind}"
        for sub in ("eval", "base"):
            assert sorted(p.name for p in (run / "mbpp" / sub).glob("*.json")) == [
                "humaneval.json",
                "humaneval.lm_eval.json",
                "mbpp.json",
                "mbpp.lm_eval.json",
            ]
        fx = json.loads((run / "mbpp/side_effects.json").read_text())
        assert fx["kl"] > 0 and fx["embedding_change"] == 0.0
        if kind == "pit":
            assert within(fx["delta_ti_after"], interface_bound(load_model(run / "mbpp/merged").interface))
        assert (run / "mbpp/merged/model.safetensors").is_file()
    table = pd.read_csv(workdir / "results/tables/table4_scores.csv")
    assert len(table) == 2 and set(table["method"]) == {"PIT", "TT"} and set(table["mode"]) == {"teacher"}
    for col in ("mbpp", "paper_mbpp", "humaneval", "paper_humaneval", "nll_mbpp", "base_nll_mbpp"):
        assert table[col].notna().all() and table[col].dtype.kind == "f", col
    assert (table["problems_mbpp"] == 2).all() and (table["problems_humaneval"] == 2).all()
    assert (table["standin_data"] == "mbpp-standin").all()  # HumanEval is the real data set
    from pit.evaluation.sandbox import sandbox_label, sandbox_mode

    assert set(table["sandbox"]) == {sandbox_label(sandbox_mode())}  # every score says how its code ran
    effects = pd.read_csv(workdir / "results/tables/table4_side_effects.csv")
    keys = ["mode", "slot", "method"]
    assert effects[keys].equals(table[keys])  # the same runs, in the same order
    for col in ("gain_mbpp", "nll_gain_mbpp", "kl_mbpp", "val_loss_change_mbpp", "interface_change_mbpp"):
        assert effects[col].notna().all() and effects[col].dtype.kind == "f", col
    assert (effects["kl_mbpp"] > 0).all() and "mbpp" not in effects.columns
    report = (workdir / "results/REPORT.md").read_text()
    assert "## Table 4 (scores)" in report and "## Table 4 (side effects)" in report
    notes = json.loads((workdir / "results/tables/table4_scores.json").read_text())["notes"]
    (decoding,) = [n for n in notes if n.startswith("Decoding")]  # from the score files' protocol
    assert "0-shot, greedy, at most 8 new tokens (batch " in decoding and '`"[DONE]"`' in decoding, decoding
    assert decoding in report and decoding in (workdir / "results/tables/table4_scores.md").read_text()
    score = json.loads((workdir / "results/posttrain/teacher/256m/pit/mbpp/eval/mbpp.lm_eval.json").read_text())
    assert score["protocol"]["decoding"]["max_new_tokens"] == 8 and score["protocol"]["problems"] == 2


def test_paper_profile_dry_run_has_fifteen_gpu_pretraining_jobs(tmp_path):
    proc = snakemake(tmp_path, "-n", "-p", "pretrain_all", "--configfile", str(PAPER_CONFIG))
    counts = job_counts(proc.stdout)
    assert (
        counts["pretrain"] == 15 and "pretrain_stand_in_teacher" not in counts
    )  # 3 teacher slots x (pit, pit-head, tt)
    assert proc.stdout.count("gpus=1") >= 15
    assert "cerebras/Cerebras-GPT-256M" in proc.stdout and "scratch-1.17b" in proc.stdout


def test_transition_figure_traces_the_configured_prompts_verbatim(tmp_path):
    """Figure 2's job gets each prompt as configured (line breaks, leading spaces), not its JSON text."""
    proc = snakemake(tmp_path, "-n", "-p", "--forcerun", "figure_transition", "results/figures/figure2_transition.png")
    command = proc.stdout.split("pit figure transition", 1)[1].split("> results/logs", 1)[0]
    words = shlex.split(command)
    prompts = [words[i + 1] for i, w in enumerate(words) if w == "--prompt"]
    configured = yaml.safe_load((ROOT / DEFAULT_CONFIG).read_text())["report"]["transition_prompts"]
    assert prompts == configured and any("\n" in p for p in prompts) and any(p.startswith("  ") for p in prompts)


def test_html_report_renders_in_headless_chromium(pipeline_project, tmp_path):
    import re
    import shutil
    import subprocess

    workdir = pipeline_project.root
    pipeline_project.snakemake("--report", "report.html")
    html = workdir / "report.html"
    raw = html.read_text()
    for name in (
        "table1.html",
        "table2.html",
        "table3.html",
        "table4_scores.html",
        "table4_side_effects.html",
        "figure3_scratch_loss.png",
        "figure4_teacher_loss.png",
        "interface_drift.png",
        "figure2_transition.png",
        "REPORT.html",
    ):
        assert name in raw, name
    chromium = shutil.which("chromium")
    assert chromium, "Chromium is required for this test (bash scripts/setup.sh --test-system-packages)"
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=15000",
    ]
    dom = subprocess.run([chromium, *flags, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.sub(r"<script.*?</script>", "", dom.stdout[dom.stdout.find("<body") :], flags=re.S)
    text = re.sub(r"<[^>]+>", " ", body)
    assert "Tables" in text and "Figures" in text, "the report's result categories were not rendered"
    assert "Read the report first" in " ".join(text.split())
    assert "Uncaught" not in dom.stderr, [line for line in dom.stderr.splitlines() if "Uncaught" in line]
    shot = tmp_path / "report.png"
    subprocess.run(
        [chromium, *flags, f"--screenshot={shot}", "--window-size=1280,900", html.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    from PIL import Image

    assert len(np.unique(np.asarray(Image.open(shot).convert("L")))) > 10, "the rendered report is blank"
    # click table1's entry as a person would; the table opens inline, its numbers readable in the page
    import pandas as pd

    text = report_entry_text(chromium, flags[:-3], html.as_uri(), "results/tables/table1.html")
    assert text.startswith("Table 1.") and "Profile: default" in text, text[:200]
    flat = " ".join(text.split())  # the table's notes, as REPORT.md has them
    assert "first_loss = training loss of the first step" in flat and "PIT-head (`t_init: power`" in flat, flat[:600]
    text = report_entry_text(chromium, flags[:-3], html.as_uri(), "results/REPORT.html", "Report (read first)")
    assert text.startswith("PIT reproduction report: profile default") and "Provenance" in text, text[:300]
    assert text.index("Summary") < text.index("Provenance") < text.index("Table 1"), text[:300]
    table1 = pd.read_csv(workdir / "results/tables/table1.csv")
    for value in (*table1["val_loss"], *table1["first_loss"]):
        assert f"{value:.4g}" in text, (value, text[:500])
