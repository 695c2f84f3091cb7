"""The paper smoke profile (config/paper-smoke.yaml): its hub-format fixtures go through the hub code paths, it
changes only budgets, sources and devices of config/paper.yaml, and the optimizer it substitutes where AdamW does
not fit in memory trains and resumes like AdamW. The run itself (`bash scripts/paper_smoke.sh`, 2h06m on 2
cores) is documented in docs/workflow.md, with its last result."""

import json
import re

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from helpers import PAPER_CONFIG, ROOT, snakemake
from test_train import rows, spec

from pit.data.download import download
from pit.data.hub_fixture import SCHEMA, write_fineweb_fixture
from pit.models.configs import MODELS, TeacherSpec
from pit.models.teacher import gpt2_config, load_teacher, write_random_teacher
from pit.training.args import PretrainArgs
from pit.training.pretrain import train

SMOKE_CONFIG = ROOT / "config/paper-smoke.yaml"


def leaves(d, prefix=()):
    for key, value in d.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, (*prefix, key))
        else:
            yield (*prefix, key)


def test_smoke_profile_overrides_only_budgets_sources_and_devices():
    paper, smoke = (yaml.safe_load(p.read_text()) for p in (PAPER_CONFIG, SMOKE_CONFIG))
    allowed = re.compile(
        r"^(profile|corpus/(hub_id|max_bytes|val_fraction)|tokenizers/bpe32k/sample_bytes|tokenize/.*"
        r"|mlflow/experiment|pretrain/(teacher|scratch)_slots/[^/]+/(teacher|train/optimizer)"
        r"|pretrain/train/.*|pretrain/mode_train/teacher/warmup_steps|pretrain/resources/.*|diagnostics/"
        r"(positions|bigram_tokens)|posttrain/(keep_merged|data_source|lora/.*|evaluate/.*|resources/.*))$"
    )
    slots = smoke["pretrain"]["scratch_slots"]
    assert all(slots[s]["model"] == paper["pretrain"]["scratch_slots"][s]["model"] for s in slots)  # restated only
    changed = ["/".join(k) for k in leaves(smoke) if k[-1] != "model"]
    assert changed and all(allowed.match(k) for k in changed), [k for k in changed if not allowed.match(k)]
    # the shapes stay the paper's: context, slots and their models, arms, interface, LoRA rank and targets
    assert "context_length" not in smoke and "interfaces" not in smoke["pretrain"]
    assert not {"rank", "targets", "alpha"} & set(smoke["posttrain"]["lora"])
    assert set(smoke["pretrain"]["teacher_slots"]) == set(paper["pretrain"]["teacher_slots"])


def test_smoke_dag_runs_every_slot_at_its_real_shape(tmp_path):
    """The merged profile's run specs: context 1024, the paper's models, AdamW except the two 1.3B-class slots."""
    proc = snakemake(tmp_path, "-n", "-p", "--configfile", str(PAPER_CONFIG), str(SMOKE_CONFIG))
    specs = [json.loads(s.replace("'\\''", "'")) for s in re.findall(r"pit train --spec '(.*?)' --out", proc.stdout)]
    assert len(specs) == 15
    by_slot = {}
    for s in specs:
        by_slot.setdefault(s["run_name"].split("-")[1], set()).add((s["model"], s["seq_len"], s.get("optimizer")))
    models = {slot: {m for m, _, _ in v} for slot, v in by_slot.items()}
    assert models == {
        "256m": {"fixtures/cerebras-gpt-256m"},
        "590m": {"fixtures/cerebras-gpt-590m"},
        "1.3b": {"fixtures/cerebras-gpt-1.3b"},
        "303m": {"scratch-303m"},
        "613m": {"scratch-613m"},
        "1.17b": {"scratch-1.17b"},
    }
    assert all(seq == 1024 for v in by_slot.values() for _, seq, _ in v)
    assert {slot for slot, v in by_slot.items() if any(o == "sgd" for _, _, o in v)} == {"1.3b", "1.17b"}


def test_fineweb_fixture_reads_through_the_hub_path(tmp_path, monkeypatch):
    """A folder in the hub repository's layout: `pit data download` with source hub reads it via load_dataset,
    with FineWeb-Edu's columns and types."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = tmp_path / "fineweb-edu"
    facts = write_fineweb_fixture(folder, "@stdlib/json/*.py", [], max_bytes=10**9, shard_documents=3)
    shards = sorted((folder / "sample/10BT").glob("*.parquet"))
    assert len(shards) == facts["shards"] == 2 and facts["documents"] == 5
    assert pq.read_schema(shards[0]).remove_metadata() == SCHEMA
    spec = {
        "name": "fw",
        "source": "hub",
        "hub_id": str(folder),
        "hub_config": "sample-10BT",
        "hub_split": "train",
        "text_field": "text",
        "max_documents": None,
        "max_bytes": None,
        "val_fraction": 0.5,
        "seed": 0,
        "shard_documents": 100,
    }
    manifest = download(spec, tmp_path / "corpus/manifest.json")
    assert manifest["documents"] == 5 and sum(manifest["splits"].values()) == 5
    with pytest.raises(Exception, match="sample-100BT"):
        download(spec | {"hub_config": "sample-100BT"}, tmp_path / "bad/manifest.json")


@pytest.mark.parametrize("name", ["cerebras-gpt-256m", "cerebras-gpt-590m", "cerebras-gpt-1.3b"])
def test_teacher_fixture_has_the_published_shape(name):
    """Parameter counts of the published Cerebras-GPT models (on the meta device: no memory)."""
    from transformers import GPT2LMHeadModel

    spec = MODELS[name]
    config = gpt2_config(spec, activation_function="gelu", n_inner=4 * spec.n_embd, layer_norm_epsilon=1e-5)
    with torch.device("meta"):
        n = sum(p.numel() for p in GPT2LMHeadModel(config).parameters())
    assert round(n / 1e6) == {"cerebras-gpt-256m": 256, "cerebras-gpt-590m": 590, "cerebras-gpt-1.3b": 1316}[name]


def test_teacher_fixture_loads_through_load_teacher(tmp_path):
    spec = TeacherSpec(2, 64, 4, 128, hub_id="example/tiny")
    written = write_random_teacher(spec, tmp_path / "t", seed=3)
    loaded = load_teacher(str(tmp_path / "t"))
    assert loaded.config.activation_function == "gelu" and loaded.config.n_inner == 256
    assert all(torch.equal(a, b) for a, b in zip(written.state_dict().values(), loaded.state_dict().values()))
    again = write_random_teacher(spec, tmp_path / "t2", seed=3)
    assert torch.equal(again.lm_head.weight, written.lm_head.weight)  # seeded


def test_sgd_run_trains_and_resumes_exactly(tiny_data, tmp_path):
    s = spec(tiny_data, interface={"kind": "tt"}, optimizer="sgd", lr=2.0, min_lr=0.2, max_steps=6, checkpoint_every=2)
    full = train(PretrainArgs.from_dict(s), tmp_path / "full")
    losses = [r["loss"] for r in rows(tmp_path / "full")]
    assert losses[-1] < losses[0] - 0.05, losses  # SGD at lr 0.5 learns on this data
    train(PretrainArgs.from_dict(s | {"stop_after_steps": 3}), tmp_path / "resumed")
    resumed = train(PretrainArgs.from_dict(s), tmp_path / "resumed")
    assert [r["loss"] for r in rows(tmp_path / "resumed")] == losses
    assert resumed["val_loss"] == full["val_loss"]
    adamw = train(PretrainArgs.from_dict(spec(tiny_data, max_steps=6)), tmp_path / "adamw")
    assert adamw["val_loss"] != full["val_loss"]


def test_summary_reads_job_wall_times_from_snakemake_logs(tmp_path):
    """scripts/paper_smoke_summary.py: each finished job's wall time by rule and slot, jobs side by side included
    (the lines as Snakemake 9 writes them)."""
    import importlib.util

    spec_ = importlib.util.spec_from_file_location("paper_smoke_summary", ROOT / "scripts/paper_smoke_summary.py")
    summary = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(summary)
    log = tmp_path / ".snakemake" / "log" / "2026-11-25T173428.189519.snakemake.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        "[Wed Nov 25 17:34:53 2026]\nlocalrule pretrain:\n    jobid: 17\n"
        "    wildcards: mode=scratch, slot=303m, interface=pit\n    threads: 2\n"
        "[Wed Nov 25 17:35:00 2026]\nrule diagnose:\n    jobid: 3\n"
        "    wildcards: mode=teacher, slot=1.3b, interface=tt\n"
        "[Wed Nov 25 17:38:46 2026]\nFinished jobid: 17 (Rule: pretrain)\n1 of 112 steps (1%) done\n"
        "[Wed Nov 25 17:40:00 2026]\nFinished jobid: 3 (Rule: diagnose)\n"
        "[Wed Nov 25 17:40:01 2026]\nlocalrule all:\n    jobid: 0\n"
    )
    assert summary.job_seconds(log) == [("pretrain", "303m", 233.0), ("diagnose", "1.3b", 300.0)]
    rows = summary.job_rows(tmp_path)
    assert "| pretrain | 303m | 1 | 233-233 s | 3.9 min |" in rows and rows[-1] == "| all | | 2 | | 8.9 min |"
