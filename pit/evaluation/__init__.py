"""Downstream evaluation (`pit evaluate`): HumanEval/MBPP pass@1 in a sandbox, GSM8K/SVAMP exact match.

Modules: `tasks` (data, prompts, scoring), `sandbox` (running untrusted code), `answers` (final numeric
answers), `generate` (batched completions with a checkpoint), `cli`. See docs/evaluation.md.
"""
