"""MLflow summary run and export (docs/reproducibility.md): after the report, the tables, figures and
REPORT.md are logged as artifacts of a run `summary-<profile>` in the profile's experiment
(`mlflow.experiment`); then every run of that experiment (tags, params, metric histories) is written
to results/mlflow/runs.jsonl, which DVC shares: `pit mlflow sync results/mlflow` loads it into a store.
With MLflow off nothing was tracked and the export is empty.
"""

import shlex

MLFLOW_EXPORT_FILE = "results/mlflow/runs.jsonl"


def mlflow_export_command():
    """`pit mlflow export` of the profile's experiment to {output.runs}; an empty file with MLflow off."""
    settings = config["mlflow"]
    if not settings["enabled"]:
        return ": > {output.runs}"
    uri = f" --tracking-uri {shlex.quote(settings['tracking_uri'])}" if settings["tracking_uri"] else ""
    return f"pit mlflow export --experiment {shlex.quote(settings['experiment'])}{uri} --out {{output.runs}}"


rule mlflow_summary:
    input:
        table_files() + figure_files() + [REPORT_FILE],
    output:
        summary=MLFLOW_SUMMARY_FILE,
        runs=MLFLOW_EXPORT_FILE,
    log:
        log_path("report", "mlflow_summary"),
    conda:
        ENV
    params:
        config=json_arg(config),
    shell:
        logged(
            f"(pit mlflow summary --config {{params.config}} --tables {TABLES_DIR} --figures {FIGURES_DIR}"
            f" --report {REPORT_FILE} --out {{output.summary}} && {mlflow_export_command()})"
        )
