"""MLflow summary run (docs/reproducibility.md): after the report, the tables, figures and
REPORT.md are logged as artifacts of a run `summary-<profile>` in the profile's experiment
(`mlflow.experiment`). Included last: its input is every table and figure `rule all` builds.
"""

SUMMARY_INPUTS = [t for t in ALL_TARGETS if t.startswith(("results/tables/", "results/figures/"))]


rule mlflow_summary:
    input:
        SUMMARY_INPUTS + ["results/REPORT.md"],
    output:
        "results/mlflow/summary.json",
    params:
        config=json_arg(config),
    log:
        log_path("report", "mlflow_summary"),
    conda:
        ENV
    shell:
        logged(
            "pit mlflow summary --config {params.config} --tables results/tables --figures results/figures"
            " --report results/REPORT.md --out {output}"
        )


ALL_TARGETS += ["results/mlflow/summary.json"]
