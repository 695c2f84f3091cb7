"""Downstream evaluation (`pit evaluate`): HumanEval/MBPP pass@1 in a sandbox, GSM8K/SVAMP exact match.

Modules: `tasks` (task specs, data loading, prompts, scoring), `standins` (offline stand-in data for
MBPP, GSM8K, SVAMP), `testcheck` (every test of a task file calls the solution), `answers` (final numeric
answers), `sandbox` (running untrusted code), `harness` (what runs
inside the sandbox: the solution, then one call at a time), `rpc` (the trusted side: the tests and the verdict, and
the plain-data codec between the two), `generate` (batched completions with a checkpoint), `evaluate` (generate,
score and write results per checkpoint).
The command line is pit/commands/evaluate.py. See docs/evaluation.md.
"""
