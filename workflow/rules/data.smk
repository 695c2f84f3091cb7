"""Data stage: corpus -> tokenizers -> flat token files (docs/data.md)."""


rule download_corpus:
    output:
        corpus_manifest(),
    params:
        spec=json_arg(config["corpus"]),
    log:
        log_path("data", f"download_{CORPUS}"),
    conda:
        ENV
    shell:
        logged("pit data download --spec {params.spec} --out {output}")


rule gpt2_tokenizer:
    output:
        directory(tokenizer_dir("{tokenizer}")),
    wildcard_constraints:
        tokenizer=name_pattern(tokenizers_of_kind("gpt2")),
    params:
        spec=lambda wc: json_arg(config["tokenizers"][wc.tokenizer]),
    log:
        log_path("data", "tokenizer_{tokenizer}"),
    conda:
        ENV
    shell:
        logged("pit data tokenizer --name {wildcards.tokenizer} --spec {params.spec} --out {output}")


rule train_bpe_tokenizer:
    input:
        corpus_manifest(),
    output:
        directory(tokenizer_dir("{tokenizer}")),
    wildcard_constraints:
        tokenizer=name_pattern(tokenizers_of_kind("bpe")),
    params:
        spec=lambda wc: json_arg(config["tokenizers"][wc.tokenizer]),
    log:
        log_path("data", "tokenizer_{tokenizer}"),
    conda:
        ENV
    shell:
        logged(
            "pit data tokenizer --name {wildcards.tokenizer} --spec {params.spec} --corpus {input}"
            " --out {output}"
        )


rule tokenize:
    input:
        corpus=corpus_manifest(),
        tokenizer=tokenizer_dir("{tokenizer}"),
    output:
        tokens=token_file("{tokenizer}", "{split}"),
        sidecar=token_sidecar("{tokenizer}", "{split}"),
    wildcard_constraints:
        tokenizer=name_pattern(TOKENIZERS),
        split="train|val",
    params:
        batch_documents=config["tokenize"]["batch_documents"],
        token_budget=lambda wc: config["tokenize"]["token_budget"] if wc.split == "train" else None,
        context_length=config["context_length"],
    threads: config["tokenize"]["workers"]
    log:
        log_path("data", "tokenize_{tokenizer}_{split}"),
    conda:
        ENV
    shell:
        logged(
            "pit data tokenize --corpus {input.corpus} --split {wildcards.split} --tokenizer {input.tokenizer}"
            " --out {output.tokens} --workers {threads} --batch-documents {params.batch_documents}"
            " --token-budget {params.token_budget} --context-length {params.context_length}"
        )


ALL_TARGETS += [token_file(t, s) for t in TOKENIZERS for s in SPLITS]


rule data:
    """Target: the data stage only (`snakemake --cores all data`)."""
    input:
        [token_file(t, s) for t in TOKENIZERS for s in SPLITS],
