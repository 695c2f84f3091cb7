"""Settings people can discover (issue 31, section 4): `pit train --help` lists every field of the run arguments
from the dataclasses (without importing torch), settings come from a YAML/JSON file with `--set` overrides and
`--print-config` round-trips; the config schema takes the run settings' rules from the same fields; `pit config
check` answers in one line; the workflow's profile logic (pit/pipeline) keeps its arm order and runs; job logs get
plain progress lines.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import subprocess
import sys
from importlib.metadata import version

import jsonschema
import pytest
import yaml
from helpers import ROOT, write_config

from pit.commands import main
from pit.commands.run_settings import apply_override
from pit.pipeline.config import schema
from pit.pipeline.profile import Profile, arm_kind, mode_arms
from pit.progress import progress_bar
from pit.training.args import LoraArgs, PretrainArgs, check_field, field_docs

TRAIN = {"mode": "scratch", "model": "scratch-tiny", "train_data": "t.bin", "val_data": "v.bin", "tokenizer": "tok"}


def run_pit(capsys, *argv) -> tuple[int, str, str]:
    """`pit ARGV` in this process: (exit code, stdout, stderr)."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as err:  # --help, --version, argparse's usage errors
        rc = err.code
    out, err = capsys.readouterr()
    return rc, out, err


# --- Help and version ---------------------------------------------------------------------------------------


def test_help_lists_every_field_with_its_docstring_and_imports_no_torch():
    code = (
        "import sys\nfrom pit.commands import build_parser\n"
        "for argv in (['train'], ['lora', 'train']):\n"
        "    parser = build_parser(argv)\n"
        "    sub = parser._subparsers._group_actions[0].choices[argv[0]]\n"
        "    if len(argv) > 1: sub = sub._subparsers._group_actions[0].choices[argv[1]]\n"
        "    print(sub.format_help()); print('=====')\n"
        "print('TORCH' if 'torch' in sys.modules or 'transformers' in sys.modules else 'NO TORCH')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    train_help, lora_help, imported = proc.stdout.split("=====\n")
    assert imported.strip() == "NO TORCH"
    for text, cls in ((train_help, PretrainArgs), (lora_help, LoraArgs)):
        flat = " ".join(text.split())
        for f in dataclasses.fields(cls):
            doc = " ".join(field_docs(cls)[f.name].split()[:6])
            assert f"  {f.name} (" in text and doc in flat, f.name
    assert "  lr (float; default 0.003; > 0)" in train_help and "  lr (float; default 0.0002; > 0)" in lora_help
    assert "  mode (str; required; one of 'scratch', 'teacher', 'continue')" in train_help


def test_version_is_the_package_metadata(capsys):
    """One copy of the version: pit/checkout.py's VERSION is pit.__version__ and, through pyproject.toml's dynamic
    version, the installed distribution's."""
    import pit

    rc, out, _ = run_pit(capsys, "--version")
    assert rc == 0 and out.strip() == f"pit {version('pit-repro')}"
    assert version("pit-repro") == pit.__version__


# --- Settings: file, --set, --print-config ------------------------------------------------------------------


INTERFACE_DEFAULTS = {"kind": "pit", "trainable_z": False, "t_init": "identity", "diag_clamp": None,
                      "retraction_eps": 0.0, "init_std": 0.02, "t_power": 1.0, "t_scale": 1.0,
                      "tt_init": "teacher"}  # fmt: skip
MLFLOW_DEFAULTS = {"tracking_uri": None, "experiment": "pit", "enabled": True}


@pytest.mark.parametrize(
    ("command", "base", "sets", "expected"),
    [
        (["train"], TRAIN, ["lr=1e-3", "interface.kind=tt", "max_steps=20", "tags={a: b}", "mlflow.enabled=false"],
         {"lr": 0.001, "interface": {**INTERFACE_DEFAULTS, "kind": "tt"}, "max_steps": 20, "warmup_steps": 2,
          "tags": {"a": "b"}, "mlflow": {**MLFLOW_DEFAULTS, "enabled": False}}),
        (["lora", "train"], {"base": "b", "task": "mbpp"}, ["rank=16", "targets.pit_scratch=[q_proj]"],
         {"rank": 16, "targets": {"pit_scratch": ["q_proj"], "pit_gpt2": ["attn.c_attn", "attn.c_proj"]},
          "mlflow": MLFLOW_DEFAULTS}),
    ],
)  # fmt: skip
def test_set_overrides_and_print_config_round_trip(tmp_path, capsys, command, base, sets, expected):
    """--print-config prints every setting with its default filled in, inside the interface and the MLflow block
    too (where the run logs: `tracking_uri: null` with a comment naming the store it resolves to now); read back,
    the printed file gives the same settings and the same run fingerprint as the file and --set it came from."""
    first = tmp_path / "settings.yaml"
    first.write_text(yaml.safe_dump(base))
    given = [a for s in sets for a in ("--set", s)]
    rc, out, err = run_pit(capsys, *command, "--config", first, *given, "--print-config")
    assert rc == 0, err
    printed = yaml.safe_load(out)
    assert {k: printed[k] for k in expected} == expected
    cls = PretrainArgs if command == ["train"] else LoraArgs
    assert list(printed) == [f.name for f in dataclasses.fields(cls)]  # every setting, in field order
    assert "  tracking_uri: null  # $MLFLOW_TRACKING_URI, else the default; now: " in out
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(out)
    rc, again, _ = run_pit(capsys, *command, "--config", resolved, "--print-config")
    assert rc == 0 and again == out  # the printed settings, read back, print the same text
    original = dict(base)
    for text in sets:
        apply_override(original, cls, text)
    assert cls.from_dict(printed) == cls.from_dict(original)  # the same settings as the file and --set
    assert cls.from_dict(printed).fingerprint() == cls.from_dict(original).fingerprint()


def test_flags_are_not_abbreviated_and_a_setting_given_as_a_flag_names_its_set(capsys):
    """argparse abbreviations are off (`--stag` is not `--stage`), an unknown flag is reported by the subcommand
    that got it (its usage, not the top level's) with the nearest flag, and a run setting given as a flag names the
    --set that sets it."""
    rc, out, err = run_pit(capsys, "runs", "--stag", "evaluate")
    assert rc == 2 and out == "" and err.startswith("usage: pit runs ")
    assert err.splitlines()[-1] == (
        "pit runs: error: unrecognized arguments: --stag evaluate (--stag: did you mean --stage?)"
    )
    rc, _, err = run_pit(capsys, "train", "--max-steps", "5", "--out", "x")
    assert rc == 2 and err.startswith("usage: pit train ")
    assert err.splitlines()[-1] == (
        "pit train: error: unrecognized arguments: --max-steps 5 (--max-steps is a run setting: use --set max_steps=5)"
    )
    rc, _, err = run_pit(capsys, "lora", "train", "--rank=4", "--threds", "2")
    assert rc == 2 and err.splitlines()[-1] == (
        "pit lora train: error: unrecognized arguments: --rank=4 --threds 2 (--rank is a run setting: use --set "
        "rank=4) (--threds: did you mean --threads?)"
    )


def test_every_argument_parser_refuses_abbreviations():
    """pit's own parser class (every subcommand's, through add_subparsers) and every script's and benchmark's
    parser are made with allow_abbrev=False."""
    from pit.commands import PitArgumentParser, build_parser

    parser = build_parser(["lora", "train"])
    lora = parser._subparsers._group_actions[0].choices["lora"]
    nested = lora._subparsers._group_actions[0].choices["train"]
    assert isinstance(nested, PitArgumentParser) and not parser.allow_abbrev and not nested.allow_abbrev
    made = {}  # file:line -> the call's allow_abbrev, for every argparse.ArgumentParser(...) in the repository
    for path in sorted(
        p for folder in ("pit", "scripts", "benchmarks", "workflow") for p in (ROOT / folder).rglob("*.py")
    ):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "ArgumentParser":
                flag = next((k.value for k in node.keywords if k.arg == "allow_abbrev"), None)
                made[f"{path.relative_to(ROOT)}:{node.lineno}"] = getattr(flag, "value", flag)
    assert len(made) > 15 and all(v is False for v in made.values()), made


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["lr=abc"], "--set 'lr=abc': train config: lr \"abc\" is a string; expected a number"),
        (["lr=-1"], "--set 'lr=-1': train config: lr -1; expected > 0"),
        (["lrr=1"], "--set 'lrr=1': unknown setting 'lrr'; expected one of ['adam_eps', "),
        (["interface.kind=xx"], '--set \'interface.kind=xx\': train config: interface {"kind": "xx"}: interface kind'),
        (["lr.x=1"], "--set 'lr.x=1': lr is not a mapping"),
        (["lr"], "--set 'lr': expected KEY=VALUE, e.g. lr=1e-3 or interface.kind=tt"),
        (["max_steps=5", "warmup_steps=9"], "--set 'warmup_steps=9': train config: warmup_steps 9; expected 0 <= "),
    ],
)
def test_a_bad_set_is_one_line_naming_it(capsys, sets, message):
    import json

    rc, out, err = run_pit(capsys, "train", "--spec", json.dumps(TRAIN), *[a for s in sets for a in ("--set", s)])
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"pit train: error: {message}"), err


def test_a_settings_file_with_a_syntax_error_names_its_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("mode: scratch\nlr: [1,\n")
    rc, _, err = run_pit(capsys, "train", "--config", bad, "--print-config")
    assert rc == 2 and f"--config '{bad}': line 3, column 1: YAML syntax error" in err


# --- The schema takes the run settings' rules from the dataclasses ------------------------------------------


def edge_cases(meta: dict, kind: type) -> list[tuple[object, bool]]:
    """(value, allowed) at each bound of a field: the bound itself and the nearest value on its other side."""
    step = 1 if kind is int else 1e-9
    cases = {"ge": [(-step, False), (0, True)], "gt": [(0, False), (step, True)],
             "le": [(step, False), (0, True)], "lt": [(0, False), (-step, True)]}  # fmt: skip
    found = [(meta[b] + d, ok) for b in ("ge", "gt", "le", "lt") if b in meta for d, ok in cases[b]]
    return found + ([("not-a-choice", False), (meta["choices"][0], True)] if "choices" in meta else [])


@pytest.mark.parametrize(
    ("cls", "path"),
    [(PretrainArgs, ("$defs", "train_settings")), (LoraArgs, ("$defs", "posttrain", "properties", "lora"))],
)
def test_schema_refuses_what_the_run_arguments_refuse(cls, path):
    from pit.training.args import field_type

    section = schema()
    for key in path:
        section = section[key]
    props = section["properties"]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert set(props) == set(fields) - set(cls.not_profile_keys) and all(p["description"] for p in props.values())
    checked = 0
    for name, prop in props.items():
        validator = jsonschema.Draft202012Validator({"type": "object", "properties": {name: prop}})
        for value, ok in edge_cases(dict(fields[name].metadata), field_type(cls, name)[0]):
            try:
                check_field("c", cls, fields[name], value)
                field_ok = True
            except ValueError:
                field_ok = False
            assert validator.is_valid({name: value}) == field_ok == ok, (name, value)
            checked += 1
    assert checked > 40


# --- pit config check ---------------------------------------------------------------------------------------


def line_of(path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_config_check_answers_in_one_line(tmp_path, capsys):
    rc, out, _ = run_pit(capsys, "config", "check", ROOT / "config/config.yaml")
    assert (
        rc == 0 and "profile 'default' is valid: 21 pretraining runs (pit, pit-head, tt, untied), 24 LoRA runs" in out
    )
    rc, _, err = run_pit(capsys, "config", "check", tmp_path / "nope.yaml")
    assert (
        rc == 2 and err.strip() == f"pit config: error: config file {tmp_path / 'nope.yaml'}: No such file or directory"
    )
    broken = tmp_path / "broken.yaml"
    broken.write_text("profile: x\ncorpus: [a, b\nc: d\n")
    rc, _, err = run_pit(capsys, "config", "check", broken)
    assert rc == 2 and err.strip() == (
        f"pit config: error: {broken}:3:2: YAML syntax error in the config: expected ',' or ']', but got ':' (while "
        "parsing a flow sequence at line 2)"
    )
    misspelled = write_config(tmp_path / "key.yaml", lambda c: c["pretrain"]["train"].update(lrr=0.1))
    rc, _, err = run_pit(capsys, "config", "check", misspelled)
    assert rc == 2 and err.startswith(  # the misspelled key's own line, not its section's
        f"pit config: error: {misspelled}:{line_of(misspelled, 'lrr: 0.1')}: invalid config at pretrain.train.lrr: "
        "unknown key 'lrr'; did you mean 'lr'? expected one of 'adam_eps', "
    )
    schema_bad = write_config(tmp_path / "schema.yaml", lambda c: c["pretrain"]["train"].update(on_spike="boom"))
    rc, _, err = run_pit(capsys, "config", "check", schema_bad)
    line = line_of(schema_bad, "on_spike: boom")
    assert rc == 2 and err.strip() == (
        f"pit config: error: {schema_bad}:{line}: invalid config at pretrain.train.on_spike: 'boom' is not one of "
        "['log', 'skip', 'stop']"
    )
    crossed = write_config(
        tmp_path / "crossed.yaml", lambda c: c["pretrain"]["mode_train"]["teacher"].update(min_lr=9.0)
    )
    rc, _, err = run_pit(capsys, "config", "check", crossed)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(
        f"pit config: error: {crossed}:{line_of(crossed, 'min_lr: 9.0')}: invalid config at "
        "pretrain.mode_train.teacher.min_lr: run teacher-"
    )
    assert err.strip().endswith(": train config: lr 0.001, min_lr 9.0; expected 0 <= min_lr <= lr")  # fmt: skip


# --- The profile's arms and runs (pit/pipeline/profile.py) --------------------------------------------------


def test_arm_order_kind_and_runs_of_a_profile():
    assert arm_kind("pit-head") == "pit" and arm_kind("tt-norewarm") == "tt"
    entries = {"untied-b": {}, "pit-head": {"t_init": "head"}, "pit": {"seeds": [0]}, "tt-x": {}}
    assert mode_arms(["tt", "pit", "untied"], entries) == ["tt", "tt-x", "pit", "pit-head", "untied", "untied-b"]
    config = yaml.safe_load((ROOT / "config/study.yaml").read_text())
    p = Profile(config)
    assert p.problems() == []
    runs = p.pretrain_runs()
    # teacher (its slot's `arms`: no untied there): pit, tt, tt-matched x 10 + tt-norewarm x 3; scratch 303m: pit, tt,
    # untied x 10 + pit-z x 3; the sweep: three rates x pit, tt x 10, its `arms` leaving out untied and pit-z
    assert len(runs) == len(set(runs)) == 33 + 33 + 3 * 20 and all(run[3] in p.seeds for run in runs)
    assert {r[2] for r in runs if r[1] == "303m-lr2e-1"} == {"pit", "tt"}
    assert not [r for r in runs if r[0] == "teacher" and r[2] == "untied"]
    assert p.arm_interface("teacher", "tt-matched")["tt_init"] == "polar"
    post = p.posttrain_runs()
    assert {run[2] for run in post} == set(p.post_arms) and not any(p.sweep_of(run) for run in post)
    config["pretrain"]["scratch_arms"]["tt-bad"] = {"t_init": "head"}
    config["pretrain"]["scratch_slots"]["303m-lr2e-1"]["arms"] = ["pit", "nope"]
    config["claims"]["matched_control"] = "pit-z"
    assert Profile(config).problems() == [
        (["pretrain", "scratch_arms", "tt-bad"],
         "['t_init']: interface settings are for PIT arms, tt_init for TT arms; a tt arm takes ['train', 'seeds', "
         "'tt_init']"),
        (["claims", "matched_control"], "'pit-z': expected a TT arm of teacher mode"),
        (["pretrain", "scratch_slots", "303m-lr2e-1", "arms"], "['nope']: not an arm of scratch mode "
         "(['pit', 'pit-z', 'tt', 'tt-bad', 'untied'])"),
    ]  # fmt: skip


def test_a_deciding_matched_control_has_the_primary_arms_seeds_and_its_lora():
    """The matched control decides teacher-mode rows, so the profile is refused where it lacks a seed of the primary
    arm or gets no LoRA where the primary arm does (docs/study.md)."""
    config = yaml.safe_load((ROOT / "config/study.yaml").read_text())
    config["pretrain"]["teacher_arms"]["tt-matched"]["seeds"] = [0, 1, 2]
    config["posttrain"]["interfaces"] = ["pit", "tt"]
    assert Profile(config).problems() == [
        (["pretrain", "teacher_arms", "tt-matched", "seeds"], "'tt-matched' lacks seeds ['3', '4', '5', '6', '7', "
         "'8', '9'] of the primary arm 'pit' in slot '256m' (a deciding control)"),
        (["posttrain", "interfaces"], "['pit', 'tt']: the matched control 'tt-matched' must get LoRA where the primary "
         "arm 'pit' does"),
    ]  # fmt: skip


def test_gguf_teacher_slot_native_tokenizer_and_their_checks():
    """A GGUF slot's teacher is its materialised folder; a `teacher` tokenizer is the `checkpoint` tokenizer of that
    folder; the slot's runs read its `tokenizer`'s files; a teacher tokenizer of a stand-in slot and an unknown
    slot tokenizer are refused, naming the key."""
    from pit.reporting.report import slot_model

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["tokenizers"]["g"] = {"kind": "teacher", "slot": "g", "bos_per_window": True}
    config["pretrain"]["teacher_slots"]["g"] = {"gguf": "gemma3-270m", "tokenizer": "g"}
    p = Profile(config)
    assert p.problems() == [] and p.gguf_slots == ["g"] and p.teacher_source("g") == "resources/teachers/g"
    assert slot_model("teacher", config["pretrain"]["teacher_slots"]["g"])[0] == "gemma3-270m"  # REPORT.md's row
    assert p.tokenizer_spec("g") == {"kind": "checkpoint", "source": "resources/teachers/g", "bos_per_window": True}
    assert p.tokenizer_source_files("g") == ["resources/teachers/g"]
    assert p.run_inputs("teacher", "g")["train"] == "results/data/g/train.bin" and p.val_tokens("teacher", "256m") == (
        "results/data/gpt2/val.bin"
    )
    config["tokenizers"]["g"]["slot"] = "256m"
    config["pretrain"]["teacher_slots"]["590m"]["tokenizer"] = "nope"
    assert Profile(config).problems() == [
        (["tokenizers", "g", "slot"], "'256m': not a teacher slot with its own checkpoint (teacher or gguf; expected "
         "one of ['g'])"),
        (["pretrain", "teacher_slots", "590m", "tokenizer"], "'nope': not one of ['bpe32k', 'g', 'gpt2']"),
    ]  # fmt: skip


# --- Job logs -----------------------------------------------------------------------------------------------


def test_a_teacher_slot_can_bring_its_own_tokenizer():
    """Two teachers of different families in one profile: a slot's `tokenizer` picks its token files for its runs,
    its stand-in's, its diagnoses and its LoRA's side effects; the other slots keep pretrain.tokenizer.teacher."""
    config = yaml.safe_load((ROOT / "config/study.yaml").read_text())
    config["tokenizers"]["other"] = dict(config["tokenizers"]["bpe1k"])
    config["pretrain"]["teacher_slots"]["590m"] = {"stand_in": "gpt2-tiny-l", "tokenizer": "other"}
    p = Profile(config)
    assert p.problems() == []
    assert p.run_inputs("teacher", "590m")["train"] == "results/data/other/tests/train.bin"
    assert p.run_inputs("teacher", "256m")["train"] == "results/data/bpe1k/tests/train.bin"
    assert p.run_inputs("stand_in", "590m")["tokenizer"] == "results/tokenizers/other"
    assert p.val_tokens("teacher", "590m") == "results/data/other/tests/val.bin" == p.val_tokens("teacher", "590m")
    assert p.val_tokens("scratch", "303m") == "results/data/bpe1k/val.bin"
    assert {"results/data/other/tests/val.bin", "results/data/other/lib/train.bin"} <= set(p.token_files())
    config["pretrain"]["teacher_slots"]["590m"]["tokenizer"] = "nope"
    assert Profile(config).problems() == [
        (["pretrain", "teacher_slots", "590m", "tokenizer"], "'nope': not one of ['bpe1k', 'other']")
    ]


def test_progress_in_a_log_is_plain_lines():
    log = io.StringIO()  # not a terminal, as a workflow job's log
    bar = progress_bar(range(3, 8), initial=3, total=8, desc="run", file=log)
    for step in bar:
        bar.set_postfix(loss=f"{step:.1f}")
    lines = log.getvalue().split("\n")
    assert "\r" not in log.getvalue() and lines[-1] == "" and len(lines) == 3
    assert lines[0].startswith("run: 3/8 (38%) [") and lines[1].startswith("run: 8/8 (100%) [")
    assert lines[1].endswith(", loss=7.0]")
