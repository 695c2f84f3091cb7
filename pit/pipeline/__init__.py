"""The workflow's library: what workflow/rules/common.smk used to compute in the Snakefile's Python, as plain
functions that Snakemake, `pit config check` and the tests call alike.

- `config`: reading a profile (YAML syntax errors with file, line and column), the schema (workflow/schemas/
  config.schema.yaml with the run settings' properties generated from pit/training/args.py), validation, and the
  one error line `FILE:LINE: invalid config at KEY: ...`;
- `profile`: a validated config's names, arms (their order and kind), seeds, runs as (mode, slot, interface,
  seed) tuples, and the checks across keys the schema cannot express;
- `layout`: where every stage writes (paths only, no config);
- `specs`: the JSON object each `pit ... --spec` of a rule gets, and the check of every resolved run spec
  against pit's run arguments.

Nothing here imports torch or Snakemake: the Snakefile imports it with PyYAML and jsonschema only (both
Snakemake's own dependencies); only the check of the run specs imports torch (InterfaceConfig).
"""
