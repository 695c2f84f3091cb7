"""Diagnostics stage (Table 2, Figure 2, direct path): `pit diagnose` on every final checkpoint."""


rule diagnose:
    input:
        model=final_model(RUN),
        val=run_val_tokens,
    output:
        diagnostics_file(RUN),
    log:
        run_log("diagnostics", RUN),
    conda:
        ENV
    threads: PRETRAIN_RES["threads"]
    resources:
        **diagnose_resources(),
    params:
        spec=json_arg(diagnose_spec()),
    shell:
        logged("pit diagnose {input.model} --val-data {input.val} --spec {params.spec} --out {output} --json")
