"""`pit plan`: the bill before the run (docs/plan.md). For a profile (several files: merged in order, as
`snakemake --configfile` merges them), every job of its DAG with parameters, tokens, FLOPs, peak memory per device,
disk, time and device-hours on a named device kind at a stated MFU, the SLURM runtime each job asks for, the totals,
the DAG's wall time on N devices, and every assumption beside the numbers.

pit plan --configfile config/paper.yaml                     # GPU jobs on the profile's device kind (else h100)
pit plan --configfile config/paper.yaml --device h200 --devices 8 --mfu 0.4
pit plan --configfile config/study.yaml --json               # CPU profiles: --devices = cores
pit plan --configfile config/paper.yaml --out plan.csv       # the jobs as CSV (or plan.json: the whole plan)
"""

from __future__ import annotations

import argparse
import json

from pit.errors import PitError

DEFAULT_PROFILE = "config/config.yaml"


def default_device(config: dict) -> str:
    """The device kind the profile's `runtime: {device, margin}` names (pretrain's first), else h100."""
    for section in ("pretrain", "posttrain"):
        runtime = config[section]["resources"]["runtime"]
        if isinstance(runtime, dict):
            return runtime["device"]
    return "h100"


def _n(x, fmt: str = ".3g") -> str:
    return "" if x is None else format(x, fmt)


def duration(seconds: float) -> str:
    """Seconds as people read them: '42 s', '37 min', '7.45 h'."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.2f} h"


def to_csv(plan: dict) -> str:
    """The jobs' rows (pit.pipeline.plan.COLUMNS) as CSV."""
    import csv
    import io

    from pit.pipeline.plan import COLUMNS

    out = io.StringIO()
    writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(plan["jobs"])
    return out.getvalue()


def to_markdown(plan: dict) -> str:
    """The jobs table, the totals per rule, the totals and the assumptions, as Markdown."""
    head = (
        "| rule | job | device | params | tokens | FLOPs | memory / device (GiB) | disk (GB; + while running) | time | "
        "device-hours | SLURM runtime (min) | assumption |"
    )
    lines = [f"# Plan of profile `{plan['profile']}`", "", head, "|" + "---|" * (head.count("|") - 1)]
    for r in plan["jobs"]:
        time = duration(r["hours"] * 3600) + (" (rough)" if r["rough"] else "")
        disk = _n(r["disk_gb"] or None, ".2f") + (f" (+{r['disk_running_gb']:.2f})" if r["disk_running_gb"] else "")
        lines.append(
            f"| {r['rule']} | {r['job']} | {r['device']} x{r['width']} | {_n(r['params'])} | {_n(r['tokens'])} | "
            f"{_n(r['flops'])} | {_n(r['memory_gib'], '.1f')} | {disk} | {time} | "
            f"{r['device_hours']:.2f} | {_n(r['runtime_min'], 'd')} | {r['assumption']} |"
        )
    lines += ["", "| rule | jobs | device | FLOPs | device-hours |", "|---|---|---|---|---|"]
    for rule, r in plan["stages"].items():
        lines.append(f"| {rule} | {r['jobs']} | {r['device']} | {_n(r['flops'] or None)} | {r['device_hours']:.2f} |")
    return "\n".join(lines + ["", *total_lines(plan), "", "Assumptions:", "", *(f"- {a}" for a in plan["assumptions"])])


def total_lines(plan: dict) -> list[str]:
    t, gib = plan["totals"], 2**30
    hours = ", ".join(f"{k} {v:.1f} {'thread' if k == 'cpu' else 'GPU'}-hours" for k, v in t["device_hours"].items())
    where = f"{plan['devices']} x {plan['device']}" if plan["device"] != "cpu" else f"{plan['devices']} CPU cores"
    biggest = t["memory_job"]
    fits = "" if t["memory"] <= biggest["device_memory"] else ": it does not fit, lower micro_batch_size"
    return [
        f"- jobs: {t['jobs']} (and the target `all`); FLOPs: {t['flops']:.3g}",
        f"- device-hours: {hours}",
        f"- wall time on {where}: {duration(t['wall_seconds'])} (sum of job times {duration(t['job_seconds'])})",
        f"- peak memory per device: {t['memory'] / gib:.1f} GiB ({biggest['job']} on a {biggest['device']}, which "
        f"holds {biggest['device_memory'] / gib:.1f} GiB{fits})",
        f"- disk: {t['disk'] / 1e9:.1f} GB kept, {t['disk_peak'] / 1e9:.1f} GB at the peak; `pit share push` adds a "
        f"DVC cache copy of the kept outputs ({t['disk'] / 1e9:.1f} GB more unless the cache links files)",
    ]


def run(args: argparse.Namespace) -> int:
    from pit.io import check_output, json_text, write_text
    from pit.pipeline import cost
    from pit.pipeline.config import check_files
    from pit.pipeline.plan import build, to_json

    suffix = args.out.rsplit(".", 1)[-1].lower() if args.out and "." in args.out else None
    if args.out is not None:
        if suffix not in ("csv", "json"):
            raise PitError(f"--out {args.out!r}: expected a file name ending in .csv or .json")
        check_output(args.out, args.configfile)  # never onto a profile it reads
    if args.device is not None:
        cost.device(args.device)  # an unknown kind is one line before the profile is read
    profile = check_files(args.configfile)
    plan = to_json(profile, build(profile, args.device or default_device(profile.config), args.devices, args.mfu))
    if args.out is not None:
        write_text(args.out, to_csv(plan) if suffix == "csv" else json_text(plan))
    print(json.dumps(plan, indent=2) if args.json else to_markdown(plan))
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="the bill before the run: per job and in total FLOPs, GPU-hours, memory, disk, wall time",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--configfile",
        nargs="+",
        default=[DEFAULT_PROFILE],
        metavar="FILE",
        help=f"profile file(s), merged in order as snakemake --configfile merges them (default {DEFAULT_PROFILE})",
    )
    p.add_argument(
        "--device",
        metavar="KIND",
        help="device kind of the GPU jobs: h100, h200, or cpu (every job on CPU threads); default: the profile's "
        "runtime device, else h100",
    )
    p.add_argument(
        "--devices",
        type=int,
        metavar="N",
        help="GPUs (no GPU jobs: CPU cores) the DAG runs on (default 1 GPU, 2 cores)",
    )
    p.add_argument("--mfu", type=float, metavar="X", help="MFU of the device kind's jobs (default: the measured one)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON instead of Markdown")
    p.add_argument("--out", metavar="FILE", help="also write the jobs as CSV (FILE.csv) or the whole plan as JSON")
    p.set_defaults(func=run)
