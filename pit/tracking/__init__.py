"""MLflow tracking, best effort: the run folder's metrics.jsonl is the record, the store a view of it; and the
results shared and checked (DVC, Snakemake).

- tracker.py: `Tracker`, a run whose failures switch tracking off and never the training run
- sync.py: upload a finished run folder later with every metric the live run logs (`pit mlflow sync`)
- transfer.py: a store's runs as results/mlflow/runs.jsonl and back (`pit mlflow export`, `sync`), UI links
- summary.py: the report stage as the run `summary-<profile>` (`pit mlflow summary`)
- run_table.py: a store's runs and final metrics as one table (`pit runs`)
- provenance.py: MLflow's source tags of a run (git commit, command)
- tags.py: the tags that tell runs apart (stage, mode, arm) and nest LoRA and evaluation runs under pretraining
- share.py: `pit share push|pull`: results to a DVC remote and back, ready for Snakemake and MLflow
- verify.py: `pit verify`: rerun a target in a scratch folder, compare its numbers within stated tolerances
"""

from __future__ import annotations

from pit.tracking.provenance import git_commit
from pit.tracking.tracker import DEFAULT_TRACKING_URI, METRIC_KEYS, Tracker, flatten, store_lock, tracking_uri

__all__ = ["DEFAULT_TRACKING_URI", "METRIC_KEYS", "Tracker", "flatten", "git_commit", "store_lock", "tracking_uri"]
