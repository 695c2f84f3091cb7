"""`pit lora` and `pit side-effects`: merge/save/reload for every interface and family, resume, MLflow,
bad input (data without the fields, an adapter for another base)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from tolerances import close, interface_bound, network_depth, relative_bound, within

from pit.analysis.side_effects import side_effects
from pit.core.interfaces import InterfaceConfig
from pit.data.reader import TokenFile
from pit.errors import PitError
from pit.models.access import model_consistency, model_delta_ti
from pit.models.checkpoint import load_model
from pit.training.args import LoraArgs
from pit.training.lora import merge_adapter, train_lora

# both base families here (scratch-tiny, gpt2-tiny) are 2 blocks of d = 64: two float32 evaluations of one of them
# that round differently (tests/tolerances.py) differ by at most NETWORK relative
NETWORK = relative_bound(64, network_depth(2))


def make_base(tiny_data, folder: Path, family: str, kind: str, seed: int = 0) -> Path:
    """A small pretrained-looking checkpoint with its tokenizer (scratch: bpe2k, teacher: GPT-2 BPE)."""
    from transformers import AutoTokenizer, GPT2LMHeadModel

    from pit.models import build_model, convert_teacher
    from pit.models.configs import get_spec
    from pit.models.teacher import gpt2_config

    tok = "bpe2k" if family == "scratch" else "gpt2"
    vocab = TokenFile(tiny_data[tok]["val"]).meta["vocab_size"]
    torch.manual_seed(seed)
    if family == "scratch":
        model = build_model("scratch-tiny", InterfaceConfig(kind=kind), vocab_size=vocab, seed=seed)
    else:
        model = convert_teacher(GPT2LMHeadModel(gpt2_config(get_spec("gpt2-tiny"), vocab)), InterfaceConfig(kind=kind))
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_data[tok]["tokenizer"]).save_pretrained(folder)
    return folder


def lora_spec(base, tiny_data, family="scratch", **kw):
    tok = "bpe2k" if family == "scratch" else "gpt2"
    spec = dict(
        base=str(base),
        task="mbpp",
        limit=32,
        rank=4,
        alpha=8,
        dropout=0.1,
        max_steps=4,
        batch_size=2,
        seq_len=96,
        lr=2e-2,
        min_lr=2e-3,
        warmup_steps=1,
        val_data=tiny_data[tok]["val"],
        side_effect_windows=2,
        side_effect_seq_len=32,
        mlflow={"enabled": False},
    )
    spec.update(kw)
    return LoraArgs.from_dict(spec)


def logits(model, ids):
    with torch.no_grad():
        return model(ids, use_cache=False).logits


@pytest.mark.parametrize(
    "family,kind", [("scratch", "pit"), ("scratch", "tt"), ("scratch", "untied"), ("teacher", "pit"), ("teacher", "tt")]
)
def test_merge_save_reload_gives_identical_logits(family, kind, tiny_data, tmp_path):
    from peft import PeftModel

    base = make_base(tiny_data, tmp_path / "base", family, kind)
    run = tmp_path / "run"
    summary = train_lora(lora_spec(base, tiny_data, family), run)
    assert summary["interface"] == kind and summary["steps"] == 4
    ids = torch.randint(0, 1000, (2, 24))

    reloaded = load_model(run / "merged")
    config = json.loads((run / "merged" / "config.json").read_text())
    assert config["tie_word_embeddings"] is False  # a tied config would overwrite the head on reload
    adapted = PeftModel.from_pretrained(load_model(base), run / "adapter").eval()
    merged_again = merge_adapter(base, run / "adapter")
    before = logits(load_model(base), ids)

    out = logits(reloaded, ids)
    assert (out - before).abs().max() > 1e-4  # the update did something
    assert torch.equal(out, logits(merged_again, ids))  # the same merge, saved and reloaded: bit for bit
    assert close(out, logits(adapted, ids), 64, network_depth(2) + 1, "merged = adapter")  # W + BA vs Wx + B(Ax)
    # the frozen interface is untouched, so PIT's Delta_TI is still round-off
    fx = json.loads((run / "side_effects.json").read_text())
    assert fx["embedding_change"] == 0.0 and fx["head_change"] == 0.0
    if kind == "pit":
        assert within(fx["delta_ti_after"], interface_bound(reloaded.interface), "merged delta_ti")
    assert fx["kl"] > 0 and fx["positions"] == 2 * 32


def test_resumed_run_matches_uninterrupted_run(tiny_data, tmp_path):
    base = make_base(tiny_data, tmp_path / "base", "scratch", "pit")
    full = tmp_path / "full"
    train_lora(lora_spec(base, tiny_data, max_steps=6, checkpoint_every=2), full)
    part = tmp_path / "part"
    assert train_lora(lora_spec(base, tiny_data, max_steps=6, checkpoint_every=2, stop_after_steps=3), part) == {}
    assert (part / "checkpoints" / "step-000002").is_dir() and not (part / "summary.json").exists()
    train_lora(lora_spec(base, tiny_data, max_steps=6, checkpoint_every=2), part)  # resumes from step 2

    def losses(run):
        return [json.loads(x)["loss"] for x in (run / "metrics.jsonl").read_text().splitlines()]

    assert losses(part) == losses(full) and len(losses(full)) == 6
    a, b = (
        load_file(full / "adapter" / "adapter_model.safetensors"),
        load_file(part / "adapter" / "adapter_model.safetensors"),
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("family,kind", [("scratch", "pit"), ("teacher", "tt")])
def test_first_loss_is_the_cross_entropy_of_the_logits_on_target_tokens(family, kind, tiny_data, tmp_path):
    """The chunked fused loss of a LoRA step equals F.cross_entropy of the model's logits on the step's
    batch (targets only, prompts and padding ignored); at step 1 LoRA's B = 0, so the model is the base."""
    import numpy as np
    from transformers import AutoTokenizer

    from pit.evaluation.tasks import load_task
    from pit.training.lora import encode_examples, make_batch

    base = make_base(tiny_data, tmp_path / "base", family, kind)
    cfg = lora_spec(base, tiny_data, family, max_steps=1, warmup_steps=0, dropout=0.0)
    train_lora(cfg, tmp_path / "run")
    logged = json.loads((tmp_path / "run/metrics.jsonl").read_text().splitlines()[0])["loss"]

    tokenizer = AutoTokenizer.from_pretrained(base)
    examples = encode_examples(load_task(cfg.task, cfg.source, cfg.limit, split="train"), tokenizer, cfg.seq_len)
    pick = np.random.default_rng([cfg.seed, 0]).integers(0, len(examples), size=cfg.batch_size)
    inputs, labels = make_batch([examples[i] for i in pick], tokenizer.eos_token_id)
    assert (labels == -100).any() and (labels != -100).any()
    expected = F.cross_entropy(logits(load_model(base), inputs).flatten(0, 1), labels.flatten(), ignore_index=-100)
    assert within(abs(logged - expected.item()), NETWORK * expected.item(), "logged lora loss")  # another batching


def test_trained_interface_is_saved_with_the_adapter(tiny_data, tmp_path):
    """train_interface: PIT trains L (Z stays frozen and orthonormal); merge restores it from the adapter."""
    base = make_base(tiny_data, tmp_path / "base", "scratch", "pit")
    run = tmp_path / "run"
    train_lora(lora_spec(base, tiny_data, train_interface=True), run)
    saved = load_file(run / "adapter" / "interface.safetensors")
    assert set(saved) == {"L_offdiag", "log_diag"}
    merged = merge_adapter(base, run / "adapter")
    reloaded = load_model(run / "merged")
    ids = torch.randint(0, 1000, (2, 16))
    assert torch.equal(logits(merged, ids), logits(reloaded, ids))
    fx = json.loads((run / "side_effects.json").read_text())
    assert fx["embedding_change"] > 0 and within(fx["delta_ti_after"], interface_bound(reloaded.interface))
    assert fx["delta_ti_after"] == pytest.approx(model_delta_ti(reloaded), rel=1e-9)
    for key, value in model_consistency(reloaded).items():  # the moved interface's Table 2 metrics, after
        assert fx[f"{key}_after"] == pytest.approx(value, rel=1e-9, abs=1e-12), key


def test_side_effects_match_an_independent_computation(tiny_data, tmp_path):
    before = load_model(make_base(tiny_data, tmp_path / "a", "scratch", "tt"))
    after = load_model(make_base(tiny_data, tmp_path / "a", "scratch", "tt"))
    data = TokenFile(tiny_data["bpe2k"]["val"])
    same = side_effects(before, after, data, seq_len=16, windows=3)
    assert same["kl"] == 0.0 and same["val_loss_change"] == 0.0 and same["top1_changed"] == 0.0
    with torch.no_grad():
        after.layers[0].attn.o_proj.weight.mul_(3.0)
    fx = side_effects(before, after, data, seq_len=16, windows=3)
    batch = data.windows(data.sequential_starts(16, 3), 16)
    p, q = (F.log_softmax(logits(m, batch[:, :-1]).double(), -1) for m in (before, after))
    kl = F.kl_div(q, p, log_target=True, reduction="none").sum(-1)
    assert fx["kl"] == pytest.approx(kl.mean().item(), rel=1e-9) and fx["kl_max"] == pytest.approx(kl.max().item())
    loss_after = F.nll_loss(q.flatten(0, 1), batch[:, 1:].flatten()).item()
    assert fx["val_loss_after"] == pytest.approx(loss_after, rel=1e-9)
    assert fx["embedding_change"] == 0.0 and fx["positions"] == 3 * 16


def test_lora_run_is_logged_to_mlflow(tiny_data, tmp_path):
    import mlflow

    base = make_base(tiny_data, tmp_path / "base", "scratch", "tt")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    train_lora(
        lora_spec(
            base, tiny_data, run_name="lora-mbpp-x", mlflow={"tracking_uri": uri, "experiment": "e", "enabled": True}
        ),
        tmp_path / "run",
    )
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("e").experiment_id])
    assert run.info.run_name == "lora-mbpp-x" and run.info.status == "FINISHED"
    assert run.data.params["lora.rank"] == "4" and run.data.tags["task"] == "mbpp"
    assert {"loss", "kl", "val_loss_change", "delta_ti_after"} <= set(run.data.metrics)
    assert len(client.get_metric_history(run.info.run_id, "loss")) == 4
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"side_effects.json", "summary.json"}
    assert run.data.tags["stage"] == "lora" and run.data.tags["mlflow.source.name"] == "pit lora train"
    # `pit mlflow sync` of the run folder gives back every metric the live run logged, with its history
    later = f"sqlite:///{tmp_path / 'later.db'}"
    assert pit_cli("mlflow", "sync", str(tmp_path / "run"), "--tracking-uri", later).returncode == 0
    other = mlflow.MlflowClient(later)
    (synced,) = other.search_runs([other.get_experiment_by_name("e").experiment_id])
    assert set(synced.data.metrics) == set(run.data.metrics) and synced.data.tags == run.data.tags
    for key in run.data.metrics:
        live = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        assert sorted((m.step, m.value) for m in other.get_metric_history(synced.info.run_id, key)) == live, key


def pit_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "pit", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def test_bad_training_data_and_foreign_adapter_are_clear_errors(tiny_data, tmp_path):
    base = make_base(tiny_data, tmp_path / "base", "scratch", "pit")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps({"task_id": i, "text": "add one", "tests": []}) + "\n" for i in range(3)))
    spec = json.dumps(
        {
            "base": str(base),
            "task": "mbpp",
            "source": str(bad),
            "max_steps": 1,
            "warmup_steps": 0,
            "mlflow": {"enabled": False},
        }
    )
    proc = pit_cli("lora", "train", "--spec", spec, "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "lacks the field(s) code, test_list" in proc.stderr

    run = tmp_path / "run"
    train_lora(lora_spec(base, tiny_data, max_steps=2), run)
    other = make_base(tiny_data, tmp_path / "other", "scratch", "pit", seed=1)  # same shapes, other weights
    with pytest.raises(PitError, match="was trained on base"):
        merge_adapter(other, run / "adapter")
    proc = pit_cli(
        "lora", "merge", "--base", str(other), "--adapter", str(run / "adapter"), "--out", str(tmp_path / "m")
    )
    assert proc.returncode == 2 and "was trained on base" in proc.stderr and not (tmp_path / "m").exists()
    with pytest.raises(PitError, match="unknown keys \\['ranks'\\]"):
        LoraArgs.from_dict({"base": str(base), "task": "mbpp", "ranks": 4})
    with pytest.raises(PitError, match="task 'humaneval'"):
        LoraArgs.from_dict({"base": str(base), "task": "humaneval"})


def test_frontier_at_the_runs_own_rate_reproduces_the_run_and_the_cli_adds_it_once(tiny_data, tmp_path):
    """The frontier's LoRA is the run's LoRA at another rate: at the run's own rate it gives the run's side effects
    and in-domain NLL exactly (same examples, order and initialisation, deterministic on CPU); `pit lora train` with
    frontier_lrs writes frontier.json for a finished run, and a rerun leaves it as it is."""
    from pit.evaluation.tasks import load_task
    from pit.training.frontier import frontier, task_nll

    base = make_base(tiny_data, tmp_path / "base", "scratch", "pit")
    args = lora_spec(base, tiny_data)
    train_lora(args, tmp_path / "run")
    out = frontier(args, [args.lr, 4 * args.lr], 3, tmp_path / "frontier.json")
    own = json.loads((tmp_path / "run" / "side_effects.json").read_text())
    task, tok = load_task("mbpp", "offline", 3), load_model(tmp_path / "run" / "merged")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    same = out["points"][0]
    assert same["kl"] == pytest.approx(own["kl"], rel=1e-9, abs=1e-12)
    assert same["val_loss_change"] == pytest.approx(own["val_loss_change"], rel=1e-9, abs=1e-12)
    assert same["nll_after"] == pytest.approx(task_nll(tok, tokenizer, task), rel=1e-6)
    assert out["nll_before"] == pytest.approx(task_nll(load_model(base), tokenizer, task), rel=1e-9)
    assert same["gain"] == pytest.approx(out["nll_before"] - same["nll_after"])
    assert out["points"][1]["lr"] == 4 * args.lr and out["points"][1]["kl"] != same["kl"]
    spec = {**json.loads(json.dumps(args.__dict__)), "frontier_lrs": [4 * args.lr], "frontier_eval_limit": 3}
    cli = pit_cli("lora", "train", "--spec", json.dumps(spec), "--out", str(tmp_path / "cli"))
    assert cli.returncode == 0, cli.stderr
    written = json.loads((tmp_path / "cli" / "frontier.json").read_text())
    assert written["points"][0]["kl"] == pytest.approx(out["points"][1]["kl"], rel=1e-9)
    stamp = (tmp_path / "cli" / "frontier.json").stat().st_mtime_ns
    again = pit_cli("lora", "train", "--spec", json.dumps(spec), "--out", str(tmp_path / "cli"))
    assert again.returncode == 0 and "already finished" in again.stdout
    assert (tmp_path / "cli" / "frontier.json").stat().st_mtime_ns == stamp
    bad = pit_cli("lora", "train", "--spec", json.dumps({**spec, "frontier_lrs": [-1]}), "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "frontier_lrs [-1]" in bad.stderr
