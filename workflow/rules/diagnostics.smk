"""Diagnostics stage (Table 2, Figure 2, direct path): `pit diagnose` on every final checkpoint."""

DIAG = config["diagnostics"]


def diagnostics_file(mode, slot, interface):
    return f"results/diagnostics/{mode}/{slot}/{interface}/diagnostics.json"


rule diagnose:
    input:
        model=run_dir("{mode}", "{slot}", "{interface}") + "/final",
        val=lambda wc: token_file(PRETRAIN["tokenizer"][wc.mode], "val"),
    output:
        diagnostics_file("{mode}", "{slot}", "{interface}"),
    wildcard_constraints:
        mode="teacher|scratch",
        slot=name_pattern(TEACHER_SLOTS + SCRATCH_SLOTS),
        interface=name_pattern(INTERFACES),
    params:
        positions=DIAG["positions"],
        seq_len=DIAG["seq_len"],
        bigram_tokens=DIAG["bigram_tokens"],
        seed=DIAG["seed"],
    threads: RES["threads"]
    resources:
        mem_mb=RES["mem_mb"],
    log:
        log_path("diagnostics", "{mode}_{slot}_{interface}"),
    conda:
        ENV
    shell:
        logged(
            "pit diagnose {input.model} --val-data {input.val} --positions {params.positions}"
            " --seq-len {params.seq_len} --bigram-tokens {params.bigram_tokens} --seed {params.seed}"
            " --out {output} --json"
        )


ALL_TARGETS += [diagnostics_file(m, s, i) for m, s, i in pretrain_runs()]
