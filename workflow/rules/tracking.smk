"""MLflow summary run (docs/reproducibility.md): after the report, the tables, figures and
REPORT.md are logged as artifacts of a run `summary-<profile>` in the profile's experiment
(`mlflow.experiment`).
"""


rule mlflow_summary:
    input:
        table_files() + figure_files() + [REPORT_FILE],
    output:
        MLFLOW_SUMMARY_FILE,
    log:
        log_path("report", "mlflow_summary"),
    conda:
        ENV
    params:
        config=json_arg(config),
    shell:
        logged(
            f"pit mlflow summary --config {{params.config}} --tables {TABLES_DIR} --figures {FIGURES_DIR}"
            f" --report {REPORT_FILE} --out {{output}}"
        )
