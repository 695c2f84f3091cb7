"""Reproduction pipeline of "Rethinking Weight Tying: Pseudo-Inverse Tying" (docs/workflow.md).

    snakemake --cores all                                  # embedded default profile (config.yaml)
    snakemake --cores all --configfile config/paper.yaml   # the paper's settings
"""


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/diagnostics.smk"
include: "workflow/rules/posttrain.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/tracking.smk"  # last: logs every table and figure above as one MLflow run


rule all:
    default_target: True
    input:
        ALL_TARGETS,
