"""Tables, figures and the report (results/tables, results/figures, results/REPORT.md).

Each table is one target: `snakemake --cores all results/tables/table2.md` rebuilds only what it
needs. `snakemake --report results/report.html` collects the tables and figures with captions
from workflow/report/.
"""

PROFILE = config["profile"]
TABLE_SUFFIXES = (".md", ".csv", ".tex")
RUN_SUMMARIES = [run_dir(m, s, i) + "/summary.json" for m, s, i in pretrain_runs()]
DIAGNOSTICS = [diagnostics_file(m, s, i) for m, s, i in pretrain_runs()]


def table_outputs(name):
    stem = f"results/tables/{name}"
    return {"md": stem + ".md", "csv": report(stem + ".csv", caption=f"../report/{name}.rst", category="Tables"),
            "tex": stem + ".tex"}


rule table1:
    input:
        RUN_SUMMARIES,
    output:
        **table_outputs("table1"),
    log:
        log_path("report", "table1"),
    conda:
        ENV
    shell:
        logged(f"pit table table1 --runs results/pretrain --profile {PROFILE} --out results/tables/table1")


rule table2:
    input:
        DIAGNOSTICS,
    output:
        **table_outputs("table2"),
    log:
        log_path("report", "table2"),
    conda:
        ENV
    shell:
        logged(f"pit table table2 --runs results/diagnostics --profile {PROFILE} --out results/tables/table2")


rule table3:
    output:
        **table_outputs("table3"),
    log:
        log_path("report", "table3"),
    conda:
        ENV
    shell:
        logged(f"pit table table3 --profile {PROFILE} --out results/tables/table3")


rule table4:
    input:
        POSTTRAIN_OUTPUTS,
    output:
        **table_outputs("table4"),
    log:
        log_path("report", "table4"),
    conda:
        ENV
    shell:
        logged(f"pit table table4 --runs results/posttrain --profile {PROFILE} --out results/tables/table4")


rule figure_loss_curves:
    input:
        RUN_SUMMARIES,
    output:
        report("results/figures/figure{number}_{mode}_loss.png", caption="../report/loss_curves.rst",
               category="Figures"),
    wildcard_constraints:
        number="3|4",
        mode="teacher|scratch",
    log:
        log_path("report", "figure{number}_{mode}"),
    conda:
        ENV
    shell:
        logged(f"pit figure loss-curves --mode {{wildcards.mode}} --runs results/pretrain --profile {PROFILE}"
               " --out {output}")


rule figure_drift:
    input:
        RUN_SUMMARIES,
    output:
        report("results/figures/interface_drift.png", caption="../report/drift.rst", category="Figures"),
    log:
        log_path("report", "figure_drift"),
    conda:
        ENV
    shell:
        logged(f"pit figure drift --runs results/pretrain --profile {PROFILE} --out {{output}}")


TRACE_SLOT = config["report"]["transition_slot"]
TRACE_RUNS = [run_dir("scratch", TRACE_SLOT, i) + "/final" for i in INTERFACES]


rule figure_transition:
    input:
        TRACE_RUNS,
    output:
        report("results/figures/figure2_transition.png", caption="../report/transition.rst", category="Figures"),
    params:
        checkpoints=" ".join(f"--checkpoint {r} --label {i.upper()}" for r, i in zip(TRACE_RUNS, INTERFACES)),
        prompts=" ".join(f"--prompt {json_arg(p)}" for p in config["report"]["transition_prompts"]),
    log:
        log_path("report", "figure2_transition"),
    conda:
        ENV
    shell:
        logged(f"pit figure transition {{params.checkpoints}} {{params.prompts}} --profile {PROFILE} --out {{output}}")


rule figure_side_effects:
    input:
        POSTTRAIN_OUTPUTS,
    output:
        report("results/figures/side_effects.png", caption="../report/side_effects.rst", category="Figures"),
    log:
        log_path("report", "figure_side_effects"),
    conda:
        ENV
    shell:
        logged(f"pit figure side-effects --runs results/posttrain --profile {PROFILE} --out {{output}}")


FIGURES = ["results/figures/figure3_scratch_loss.png", "results/figures/figure4_teacher_loss.png",
           "results/figures/interface_drift.png", "results/figures/figure2_transition.png",
           "results/figures/side_effects.png"]
TABLES = [f"results/tables/{t}.md" for t in ("table1", "table2", "table3", "table4")]


rule report_md:
    input:
        TABLES + FIGURES,
    output:
        "results/REPORT.md",
    params:
        config=json_arg(config),
    log:
        log_path("report", "report_md"),
    conda:
        ENV
    shell:
        logged("pit report --config {params.config} --out {output}")


ALL_TARGETS += TABLES + FIGURES + ["results/REPORT.md"]
