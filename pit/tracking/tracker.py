"""MLflow tracking that never stops a run: `metrics.jsonl` in the run folder is the source of truth.

The tracking URI comes from `--tracking-uri` / the config, else `MLFLOW_TRACKING_URI`, else a
SQLite store in the project (`sqlite:///mlflow.db`). If the store cannot be reached (a server
down, a locked file), the first failure is logged as a warning and tracking switches off for the
rest of the run; `pit mlflow sync RUN_DIR` (pit/tracking/sync.py) uploads the run folder later.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pit.io import sha256_file
from pit.tracking.provenance import with_source_tags
from pit.tracking.tags import PRETRAIN_RUN_TAG, pretrain_run_filter, run_tags

log = logging.getLogger("pit.tracking")

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
# MLflow 3's UI reads this experiment tag to choose between its GenAI view (traces) and the model-training view
# (runs, metrics); the values are MLflow's ExperimentKind enum (mlflow/server/js: GENAI_DEVELOPMENT, ...)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
# MLflow 3.17's UI ignores that tag when choosing the view: a global GenAI / "Model training" switch does (the URL's
# workflowType, else the browser's last choice, else GenAI); links carry this query to open the runs table
UI_QUERY = "workflowType=machine_learning"
# the summary.json keys a finished training run (pretraining, LoRA) logs as metrics at its last step
FINAL_KEYS = ("val_loss", "val_ppl", "final_train_loss", "final_train_ppl", "runtime_s", "peak_memory_mb")
# the tag of a finished run's final checkpoint folder (weights stay in results/, shared by DVC, not in MLflow)
CHECKPOINT_TAG = "pit.checkpoint"
CHECKPOINT_FOLDERS = ("final", "merged")  # a finished run's model folder: pretraining final/, LoRA merged/
# MLflow keeps a dataset digest of at most 36 characters: the first 36 hex digits of the file's sha256
DIGEST_CHARS = 36
# the metrics.jsonl keys a training run logs as MLflow metrics
METRIC_KEYS = (
    "loss",
    "lr",
    "grad_norm",
    "tokens_per_s",
    "tokens",
    "delta_ti",
    "val_loss",
    "val_ppl",
    "raw_cosine",
    "raw_procrustes",
    "raw_angle",
    "polar_cosine",
    "polar_procrustes",
    "polar_angle",
)


def tracking_uri(configured: str | None = None) -> str:
    """The configured URI, else $MLFLOW_TRACKING_URI, else DEFAULT_TRACKING_URI."""
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as flat `a.b.c` keys (MLflow params); non-scalar leaves as JSON."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v if isinstance(v, (int, float, str, bool)) or v is None else json.dumps(v)
    return out


@contextlib.contextmanager
def _flock(path: Path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def store_lock(uri: str):
    """Jobs running in parallel share one SQLite store: its creation (schema migration), experiment
    creation and writes are serialised with a file lock next to the database. Other stores: no lock."""
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///") :])
        db.parent.mkdir(parents=True, exist_ok=True)
        return _flock(db.with_name(db.name + ".lock"))
    return contextlib.nullcontext()


def run_datasets(params: dict) -> dict[str, tuple[str, str | None]]:
    """The data files a run logs as dataset inputs, from its params (a pretraining run's `train` settings and
    `train_data_sha256`): {context: (path, sha256 or None)}; {} for a run without them."""
    train = params.get("train")
    if not isinstance(train, dict) or not train.get("train_data"):
        return {}
    files = {"training": (train["train_data"], params.get("train_data_sha256"))}
    if train.get("val_data"):
        files["validation"] = (train["val_data"], None)
    return files


def experiment_id(client, name: str) -> str:
    """The id of experiment `name`, created when missing; either way tagged `EXPERIMENT_KIND_TAG` =
    `EXPERIMENT_KIND`, so that MLflow 3's UI opens it on its training-runs view rather than the GenAI one."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return client.create_experiment(name, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
    if exp.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
        client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return exp.experiment_id


class Tracker:
    """A best-effort MLflow run. Every call is safe: failures disable tracking, never the run."""

    def __init__(
        self,
        uri: str | None,
        experiment: str,
        run_name: str,
        tags: dict[str, str] | None = None,
        enabled: bool = True,
        run_id: str | None = None,
        on_start: Callable[[str], None] | None = None,
    ):
        """Continue MLflow run `run_id` when the store has it (same experiment and name), else create one with `tags`
        (with `arm` and a stand-in's `mode`: pit.tracking.tags), MLflow's source tags (git commit, command:
        pit.tracking.provenance) and, for a LoRA or evaluation run, its pretraining run's id (`PRETRAIN_RUN_TAG`);
        then `on_start(run_id)` at once (the run folder records the id before anything else can happen)."""
        self.run_id = None
        self.tags = run_tags(run_name, tags)
        self.active = enabled
        if not enabled:
            return
        self._uri = tracking_uri(uri)
        # fail fast instead of retrying for minutes against a server that is down
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
        self.tags = with_source_tags(self.tags)
        self._call(self._start, self._uri, experiment, run_name, self.tags, run_id, on_start or (lambda _: None))

    def _start(self, uri, experiment, run_name, tags, run_id, on_start):
        import mlflow

        self._client = mlflow.MlflowClient(tracking_uri=uri)
        exp_id = experiment_id(self._client, experiment)
        if run_id is not None and self._resumable(run_id, exp_id, run_name):
            self.run_id = run_id
            self._client.update_run(self.run_id, status="RUNNING")
            on_start(self.run_id)
            return
        pretrain_run = self._pretrain_run(exp_id, tags)
        if pretrain_run:
            tags = self.tags = {**tags, PRETRAIN_RUN_TAG: pretrain_run}
        self.run_id = self._client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id
        on_start(self.run_id)
        self._close_orphans(exp_id, run_name, tags)

    def _pretrain_run(self, exp_id: str, tags: dict) -> str | None:
        """The pretraining run a LoRA or evaluation run belongs to: the newest finished pretraining run of its arm
        (same mode, slot, arm, seed) in the same experiment; None when there is none (or for other stages)."""
        query = pretrain_run_filter(tags)
        if query is None or PRETRAIN_RUN_TAG in tags:
            return None
        query += " and attributes.status = 'FINISHED'"
        found = self._client.search_runs([exp_id], query, max_results=1, order_by=["attributes.start_time DESC"])
        return found[0].info.run_id if found else None

    def _resumable(self, run_id: str, exp_id: str, run_name: str) -> bool:
        """Whether this store holds run `run_id` in experiment `exp_id` under `run_name` (else a new run starts)."""
        try:
            info = self._client.get_run(run_id).info
        except Exception:  # noqa: BLE001 -- gone from this store (or another store): start a new run
            return False
        return info.experiment_id == exp_id and info.run_name == run_name and info.lifecycle_stage == "active"

    def _close_orphans(self, exp_id, run_name, tags):
        """A job killed after creating its run but before its run folder recorded the id (run.json, written at
        once by `on_start`) leaves that run RUNNING and restarts with a new one: earlier RUNNING runs of the same
        name and tags are marked KILLED (tag `pit.superseded_by`), so the store shows one live run per arm."""
        if "'" in run_name:  # not expressible in a search filter; our run names never have one
            return
        stale = self._client.search_runs(
            [exp_id], filter_string=f"attributes.run_name = '{run_name}' and attributes.status = 'RUNNING'"
        )
        for run in stale:
            ours = {k: v for k, v in tags.items() if not k.startswith("mlflow.")}  # not the commit: code may change
            if run.info.run_id != self.run_id and all(run.data.tags.get(k) == str(v) for k, v in ours.items()):
                self._client.set_tag(run.info.run_id, "pit.superseded_by", self.run_id)
                self._client.set_terminated(run.info.run_id, status="KILLED")

    def _call(self, fn, *args):
        if not self.active:
            return None
        try:
            with store_lock(self._uri):
                return fn(*args)
        except Exception as err:  # noqa: BLE001  -- any tracking failure must not stop training
            log.warning(
                "MLflow tracking disabled for this run (%s: %s); metrics.jsonl keeps everything, "
                "upload later with `pit mlflow sync`",
                type(err).__name__,
                err,
            )
            self.active = False
            return None

    def log_params(self, params: dict) -> None:
        """Log the flattened `params` the run does not hold yet (MLflow params cannot change: a continued run keeps
        the values it was started with)."""

        def go():
            from mlflow.entities import Param  # here, not above: a disabled tracker never imports mlflow

            logged = self._client.get_run(self.run_id).data.params
            items = [Param(k, str(v)[:6000]) for k, v in flatten(params).items() if k not in logged]
            for i in range(0, len(items), 100):
                self._client.log_batch(self.run_id, params=items[i : i + 100])

        self._call(go)

    def log_metrics(self, rows: list[dict], keys: tuple[str, ...]) -> None:
        """Log metric rows (dicts with 'step'); only finite numeric values of `keys`."""

        def go():
            from mlflow.entities import Metric  # only when tracking is active (`_call` skips `go` otherwise)

            ts = int(time.time() * 1000)
            items = [
                Metric(k, float(r[k]), ts, int(r["step"]))
                for r in rows
                for k in keys
                if isinstance(r.get(k), (int, float)) and math.isfinite(r[k])
            ]
            for i in range(0, len(items), 1000):
                self._client.log_batch(self.run_id, metrics=items[i : i + 1000])

        self._call(go)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._call(lambda: self._client.log_artifact(self.run_id, str(path), artifact_path))

    def log_artifacts(self, folder: str | Path, artifact_path: str | None = None) -> None:
        """Every file under `folder`, as `artifact_path/...`."""
        self._call(lambda: self._client.log_artifacts(self.run_id, str(folder), artifact_path))

    def log_datasets(self, files: dict[str, tuple[str, str | None]]) -> None:
        """Each data file as an MLflow dataset input: {context (training, validation): (path, sha256 or None to
        compute it)}. Cheap: a MetaDataset whose source is the file and whose digest is its hash (no rows are read or
        copied); the UI shows it under the run's datasets. Files the run already lists (a continued run) are skipped."""

        def go():
            from mlflow.data.dataset_source_registry import get_dataset_source_from_json
            from mlflow.data.meta_dataset import MetaDataset
            from mlflow.entities import DatasetInput, InputTag

            logged = {d.dataset.name for d in self._client.get_run(self.run_id).inputs.dataset_inputs}
            inputs = []
            for context, (path, digest) in files.items():
                if str(path) in logged:
                    continue
                digest = (digest or sha256_file(path))[:DIGEST_CHARS]
                source = get_dataset_source_from_json(json.dumps({"uri": str(path)}), source_type="local")
                dataset = MetaDataset(source, name=str(path), digest=digest)
                inputs.append(DatasetInput(dataset._to_mlflow_entity(), [InputTag("mlflow.data.context", context)]))
            if inputs:
                self._client.log_inputs(self.run_id, datasets=inputs)

        self._call(go)

    def log_table(self, frame, artifact_file: str) -> None:
        """A pandas DataFrame as an MLflow table artifact (`MlflowClient.log_table`; `artifact_file` ends in .json)."""
        self._call(lambda: self._client.log_table(self.run_id, frame, artifact_file))

    def log_checkpoint(self, run_dir: str | Path) -> None:
        """The run's model folder (`CHECKPOINT_FOLDERS` in `run_dir`, as the run wrote it, e.g.
        results/pretrain/teacher/256m/pit/final) as the tag `CHECKPOINT_TAG`; nothing when it has none."""
        for name in CHECKPOINT_FOLDERS:
            if (Path(run_dir) / name).is_dir():
                self.set_tags({CHECKPOINT_TAG: str(Path(run_dir) / name)})
                return

    def set_tags(self, tags: dict[str, str]) -> None:
        self._call(lambda: [self._client.set_tag(self.run_id, k, str(v)) for k, v in tags.items()])

    def finish(self, status: str = "FINISHED") -> None:
        self._call(lambda: self._client.set_terminated(self.run_id, status=status))
