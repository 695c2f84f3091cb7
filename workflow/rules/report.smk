"""Tables, figures and the report (results/tables, results/figures, results/REPORT.md).

Each table is one target: `snakemake --cores all results/tables/table2.md` rebuilds only what it
needs. `snakemake --report results/report.html` collects REPORT.html (category "Report (read first)"), the tables
(each with its notes) and the figures with captions from workflow/report/; `pit report` reads the same captions
(--captions workflow/report, its default: the workflow runs from the repository root).
"""


rule table1:
    input:
        run_summaries(),
    output:
        **table_outputs("table1"),
    log:
        log_path("report", "table1"),
    conda:
        ENV
    shell:
        logged(f"pit table table1 --runs {PRETRAIN_ROOT} --profile {PROFILE} --out {table_stem('table1')}")


rule table2:
    input:
        diagnostics_files(),
    output:
        **table_outputs("table2"),
    log:
        log_path("report", "table2"),
    conda:
        ENV
    shell:
        logged(f"pit table table2 --runs {DIAGNOSTICS_ROOT} --profile {PROFILE} --out {table_stem('table2')}")


rule table3:
    output:
        **table_outputs("table3"),
    log:
        log_path("report", "table3"),
    conda:
        ENV
    shell:
        logged(f"pit table table3 --profile {PROFILE} --out {table_stem('table3')}")


rule table4_scores:
    input:
        posttrain_outputs(),
    output:
        **table_outputs("table4_scores"),
    log:
        log_path("report", "table4_scores"),
    conda:
        ENV
    shell:
        logged(
            f"pit table table4_scores --runs {POSTTRAIN_ROOT} --profile {PROFILE} --out {table_stem('table4_scores')}"
        )


rule table4_side_effects:
    input:
        posttrain_outputs(),
    output:
        **table_outputs("table4_side_effects"),
    log:
        log_path("report", "table4_side_effects"),
    conda:
        ENV
    shell:
        logged(
            f"pit table table4_side_effects --runs {POSTTRAIN_ROOT} --profile {PROFILE}"
            f" --out {table_stem('table4_side_effects')}"
        )


rule claims:
    """The paper's claims, each decided by its declared primary test (exact, paired over seeds, Holm per claim) with
    exploratory secondary rows beside it (docs/study.md)."""
    input:
        run_summaries() + diagnostics_files() + posttrain_outputs(),
    output:
        **table_outputs("claims"),
        seeds=f"{table_stem('claims')}_seeds.csv",
    log:
        log_path("report", "claims"),
    conda:
        ENV
    params:
        design=json_arg(P.config.get("claims", {})),
    shell:
        logged(
            f"pit table claims --runs {RESULTS_ROOT} --profile {PROFILE} --out {table_stem('claims')} "
            "--design {params.design}"
        )


rule table_stability:
    """The learning-rate sweep: spikes, skipped steps, divergence and final loss per learning rate and arm."""
    input:
        run_summaries(),
    output:
        **table_outputs("stability"),
    log:
        log_path("report", "stability"),
    conda:
        ENV
    shell:
        logged(f"pit table stability --runs {RESULTS_ROOT} --profile {PROFILE} --out {table_stem('stability')}")


rule table_teacher_gap:
    """Teacher mode: each arm's validation-loss gap to TT at every validation step."""
    input:
        run_summaries(),
    output:
        **table_outputs("teacher_gap"),
    log:
        log_path("report", "teacher_gap"),
    conda:
        ENV
    shell:
        logged(f"pit table teacher_gap --runs {RESULTS_ROOT} --profile {PROFILE} --out {table_stem('teacher_gap')}")


rule table_frontier:
    """The side-effect frontier: in-domain gain and KL per LoRA learning rate and arm."""
    input:
        run_summaries() + posttrain_outputs(),
    output:
        **table_outputs("frontier"),
    log:
        log_path("report", "frontier"),
    conda:
        ENV
    shell:
        logged(f"pit table frontier --runs {RESULTS_ROOT} --profile {PROFILE} --out {table_stem('frontier')}")


rule table_trajectory:
    """The decision (docs/real.md): arm - reference of the validation loss at every validation step, exact test each."""
    input:
        run_summaries(),
    output:
        **table_outputs("trajectory"),
    log:
        log_path("report", "trajectory"),
    conda:
        ENV
    params:
        decision=json_arg(DECISION),
    shell:
        logged(
            f"pit table trajectory --runs {RESULTS_ROOT} --profile {PROFILE} --out {table_stem('trajectory')}"
            " --decision {params.decision}"
        )


rule table_parity:
    """The decision: per seed and threshold, the training tokens from which the arm stays within it of the reference."""
    input:
        run_summaries(),
    output:
        **table_outputs("parity"),
    log:
        log_path("report", "parity"),
    conda:
        ENV
    params:
        decision=json_arg(DECISION),
    shell:
        logged(
            f"pit table parity --runs {RESULTS_ROOT} --profile {PROFILE} --out {table_stem('parity')}"
            " --decision {params.decision}"
        )


rule table_final_scores:
    """The decision: the teacher and each final model of arm and reference on the decision's tasks, as they are."""
    input:
        run_summaries() + posttrain_outputs(),
    output:
        **table_outputs("final_scores"),
    log:
        log_path("report", "final_scores"),
    conda:
        ENV
    params:
        decision=json_arg(DECISION),
    shell:
        logged(
            f"pit table final_scores --runs {RESULTS_ROOT} --profile {PROFILE} --out {table_stem('final_scores')}"
            " --decision {params.decision}"
        )


rule figure_parity:
    """pit-head - TT (the decision's arm - reference) over training tokens, per seed, with the mean and interval."""
    input:
        run_summaries(),
    output:
        figure_output("parity"),
    log:
        log_path("report", "figure_parity"),
    conda:
        ENV
    params:
        decision=json_arg(DECISION),
    shell:
        logged(
            f"pit figure parity --runs {RESULTS_ROOT} --profile {PROFILE} --decision {{params.decision}} --out {{output}}"
        )


rule figure_claims:
    input:
        run_summaries() + diagnostics_files() + posttrain_outputs(),
    output:
        [figure_output(f"claims_{group}") for group in CLAIM_GROUPS],
        [figure_output(name) for name in STUDY_FIGURES],
    log:
        log_path("report", "figure_claims"),
    conda:
        ENV
    params:
        study="--study" if STUDY_FIGURES else "",
        design=json_arg(P.config.get("claims", {})),
    shell:
        logged(
            f"pit figure claims --runs {RESULTS_ROOT} --profile {PROFILE} --out-dir {FIGURES_DIR} {{params.study}} "
            "--design {params.design}"
        )


rule figure_loss_curves:
    input:
        run_summaries(),
    output:
        figure_output("figure{number}_{mode}_loss"),
    log:
        log_path("report", "figure{number}_{mode}"),
    conda:
        ENV
    shell:
        logged(
            f"pit figure loss-curves --mode {{wildcards.mode}} --runs {PRETRAIN_ROOT} --profile {PROFILE}"
            " --out {output}"
        )


rule figure_drift:
    input:
        run_summaries(),
    output:
        figure_output("interface_drift"),
    log:
        log_path("report", "figure_drift"),
    conda:
        ENV
    shell:
        logged(f"pit figure drift --runs {PRETRAIN_ROOT} --profile {PROFILE} --out {{output}}")


rule figure_transition:
    input:
        transition_runs(),
    output:
        figure_output("figure2_transition"),
    log:
        log_path("report", "figure2_transition"),
    conda:
        ENV
    params:
        args=transition_args(),
    shell:
        logged(f"pit figure transition {{params.args}} --profile {PROFILE} --out {{output}}")


rule figure_side_effects:
    input:
        posttrain_outputs(),
    output:
        figure_output("side_effects"),
    log:
        log_path("report", "figure_side_effects"),
    conda:
        ENV
    shell:
        logged(f"pit figure side-effects --runs {POSTTRAIN_ROOT} --profile {PROFILE} --out {{output}}")


rule figure_stand_in_teachers:
    input:
        [stand_in_file(slot, "summary.json") for slot in STAND_IN_SLOTS],
    output:
        figure_output("stand_in_teachers"),
    log:
        log_path("report", "figure_stand_in_teachers"),
    conda:
        ENV
    shell:
        logged(f"pit figure stand-in-teachers --runs {STAND_IN_ROOT} --profile {PROFILE} --out {{output}}")


rule report_md:
    """REPORT.md, and REPORT.html (the same page as HTML) as the HTML report's first item."""
    input:
        table_files() + figure_files(),
    output:
        md=REPORT_FILE,
        html=report(
            REPORT_FILE.removesuffix(".md") + ".html",
            caption="../report/report_md.rst",
            category="Report (read first)",
        ),
    log:
        log_path("report", "report_md"),
    conda:
        ENV
    params:
        config=json_arg(config),
    shell:
        logged(f"pit report --config {{params.config}} --runs {PRETRAIN_ROOT} --out {{output.md}}")
