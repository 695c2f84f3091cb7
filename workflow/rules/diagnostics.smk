"""Diagnostics stage (Table 2, Figure 2, direct path): `pit diagnose` on every final checkpoint."""


rule diagnose:
    input:
        model=final_model("{mode}", "{slot}", "{interface}"),
        val=lambda wc: val_tokens(wc.mode),
    output:
        diagnostics_file("{mode}", "{slot}", "{interface}"),
    log:
        log_path("diagnostics", "{mode}_{slot}_{interface}"),
    conda:
        ENV
    threads: PRETRAIN_RES["threads"]
    resources:
        mem_mb=PRETRAIN_RES["mem_mb"],
    params:
        spec=json_arg(diagnose_spec()),
    shell:
        logged("pit diagnose {input.model} --val-data {input.val} --spec {params.spec} --out {output} --json")
