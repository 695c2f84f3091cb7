"""Data stage: corpus -> tokenizers -> flat token files (docs/data.md)."""


rule download_corpus:
    output:
        corpus_manifest(),
    log:
        log_path("data", f"download_{CORPUS}"),
    conda:
        ENV
    params:
        spec=json_arg(corpus_spec()),
    shell:
        logged("pit data download --spec {params.spec} --out {output}")


rule materialize_teacher:
    """A teacher slot declared as a GGUF model (`gguf:`): its teacher folder, made once (docs/any-model.md)."""
    input:
        lambda wc: gguf_file_input(wc.slot),
    output:
        directory(materialized_teacher("{slot}")),
    log:
        log_path("data", "teacher_{slot}"),
    wildcard_constraints:
        slot=name_pattern(GGUF_SLOTS),
    conda:
        ENV
    params:
        source=lambda wc: PRETRAIN["teacher_slots"][wc.slot]["gguf"],
    shell:
        logged("pit teacher materialize {params.source:q} --out {output}")


rule copy_tokenizer:
    input:
        lambda wc: tokenizer_source_files(wc.tokenizer),
    output:
        directory(tokenizer_dir("{tokenizer}")),
    log:
        log_path("data", "tokenizer_{tokenizer}"),
    wildcard_constraints:
        tokenizer=name_pattern(
            tokenizers_of_kind("gpt2") + tokenizers_of_kind("checkpoint") + tokenizers_of_kind("teacher")
        ),
    conda:
        ENV
    params:
        spec=lambda wc: json_arg(tokenizer_spec(wc.tokenizer)),
    shell:
        logged("pit data tokenizer --name {wildcards.tokenizer} --spec {params.spec} --out {output}")


rule train_bpe_tokenizer:
    input:
        corpus_manifest(),
    output:
        directory(tokenizer_dir("{tokenizer}")),
    log:
        log_path("data", "tokenizer_{tokenizer}"),
    wildcard_constraints:
        tokenizer=name_pattern(tokenizers_of_kind("bpe")),
    conda:
        ENV
    params:
        spec=lambda wc: json_arg(config["tokenizers"][wc.tokenizer]),
    shell:
        logged("pit data tokenizer --name {wildcards.tokenizer} --spec {params.spec} --corpus {input} --out {output}")


rule tokenize:
    input:
        corpus=corpus_manifest(),
        tokenizer=tokenizer_dir("{tokenizer}"),
    output:
        tokens=token_file("{tokenizer}", "{split}"),
        sidecar=token_sidecar("{tokenizer}", "{split}"),
    log:
        log_path("data", "tokenize_{tokenizer}_{split}"),
    priority: 20  # data before training (a waiting job's priority did not reach the jobs it waits for: docs/workflow.md)
    conda:
        ENV
    threads: config["tokenize"]["workers"]
    params:
        spec=lambda wc: json_arg(tokenize_spec(wc.split)),
    shell:
        logged(
            "pit data tokenize --corpus {input.corpus} --split {wildcards.split} --tokenizer {input.tokenizer}"
            " --out {output.tokens} --workers {threads} --spec {params.spec}"
        )


rule tokenize_domain:
    """One corpus domain's part of a split (corpus.domains: documents by path), e.g. the stand-in teacher's data
    and the data teacher-mode runs continue on."""
    input:
        corpus=corpus_manifest(),
        tokenizer=tokenizer_dir("{tokenizer}"),
    output:
        tokens=token_file("{tokenizer}", "{split}", "{domain}"),
        sidecar=token_sidecar("{tokenizer}", "{split}", "{domain}"),
    log:
        log_path("data", "tokenize_{tokenizer}_{domain}_{split}"),
    priority: 30  # before `tokenize`: the stand-in teacher (10) reads them, and must not find every GPU slot taken
    conda:
        ENV
    threads: config["tokenize"]["workers"]
    params:
        spec=lambda wc: json_arg(tokenize_spec(wc.split, wc.domain)),
    shell:
        logged(
            "pit data tokenize --corpus {input.corpus} --split {wildcards.split} --tokenizer {input.tokenizer}"
            " --out {output.tokens} --workers {threads} --spec {params.spec}"
        )


rule data:
    """Target: the data stage only (`snakemake --cores all data`): the token files and the materialised teachers."""
    input:
        token_files(),
        [materialized_teacher(slot) for slot in GGUF_SLOTS],
