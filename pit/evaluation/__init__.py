"""Downstream evaluation (`pit evaluate`): HumanEval/MBPP pass@1 in a sandbox, GSM8K/SVAMP exact match.

Modules: `tasks` (task specs, data loading, prompts, scoring), `standins` (offline stand-in data for
MBPP, GSM8K, SVAMP), `answers` (final numeric answers), `sandbox` (running untrusted code), `harness` (the
test harness inside the sandbox), `generate` (batched completions with a checkpoint), `evaluate` (generate,
score and write results per checkpoint).
The command line is pit/commands/evaluate.py. See docs/evaluation.md.
"""
