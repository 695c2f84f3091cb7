"""A single-node SLURM cluster on this machine for the tests (tests/test_slurm.py): Debian's slurm-wlm, slurmdbd
and munge (`scripts/setup.sh --test-system-packages` installs them as root), with a MariaDB for the accounting that
`sacct` reads. Everything lives under one temporary folder and listens on 127.0.0.1 only: its own munge key and socket,
its own database, free ports, state and logs; `stop()` ends every daemon and waits for it.

    with SlurmCluster(tmp_path) as cluster:
        subprocess.run(["sbatch", "--wrap", "true"], env=cluster.env)
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ["munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd", "sbatch", "sacct"]
ACCOUNT = "pit"


def missing_programs() -> list[str]:
    return [p for p in DAEMONS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(check, what: str, log: Path | None = None, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    tail = log.read_text()[-2000:] if log is not None and log.exists() else ""
    raise RuntimeError(f"test SLURM cluster: {what} did not come up in {timeout:.0f} s\n{tail}")


class SlurmCluster:
    """Start with `start()` (or `with`), stop with `stop()`; `env` is the environment for sbatch/sacct/snakemake."""

    def __init__(self, root: Path, cpus: int = 2, memory_mb: int | None = None):
        self.root = Path(root)
        self.host = socket.gethostname().split(".")[0]
        self.cpus = cpus
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        self.memory_mb = memory_mb or int(available * 0.8)
        self.ports = {k: _free_port() for k in ("db", "dbd", "ctld", "slurmd")}
        self.procs: list[subprocess.Popen] = []
        conf = str(self.root / "etc/slurm.conf")
        self.env = os.environ | {"SLURM_CONF": conf, "PATH": f"{self.root / 'bin'}:{os.environ['PATH']}"}

    # --- configuration -------------------------------------------------------------------------------------

    def _write_configs(self) -> None:
        r = self.root
        for sub in ("etc", "munge", "db", "state", "spool", "log", "run"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        # snakemake-executor-plugin-slurm-jobstep drops every SLURM_* variable but the job's identity from the
        # environment of its `srun`, SLURM_CONF included: on a real cluster srun finds /etc/slurm/slurm.conf, here
        # this wrapper (first on PATH) gives it the test cluster's file, so nothing is written outside `root`.
        (r / "bin").mkdir(exist_ok=True)
        (r / "bin/srun").write_text(f'#!/bin/sh\nSLURM_CONF={r}/etc/slurm.conf exec {_which("srun")} "$@"\n')
        (r / "bin/srun").chmod(0o755)
        key = r / "munge/munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        auth = f"AuthType=auth/munge\nAuthInfo=socket={r}/munge/munge.sock\n"
        (r / "etc/slurmdbd.conf").write_text(
            auth + f"DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={self.ports['dbd']}\nSlurmUser={getpass.getuser()}\n"
            f"PidFile={r}/run/slurmdbd.pid\nLogFile={r}/log/slurmdbd.log\nStorageType=accounting_storage/mysql\n"
            f"StorageHost=127.0.0.1\nStoragePort={self.ports['db']}\nStorageUser=root\nStorageLoc=slurm_acct_db\n"
        )
        (r / "etc/slurmdbd.conf").chmod(0o600)
        (r / "etc/slurm.conf").write_text(
            auth + f"ClusterName=pittest\nSlurmctldHost={self.host}(127.0.0.1)\nSlurmctldPort={self.ports['ctld']}\n"
            f"SlurmdPort={self.ports['slurmd']}\nSlurmUser={getpass.getuser()}\nSlurmdUser=root\n"
            f"StateSaveLocation={r}/state\nSlurmdSpoolDir={r}/spool\nSlurmctldPidFile={r}/run/slurmctld.pid\n"
            f"SlurmdPidFile={r}/run/slurmd.pid\nSlurmctldLogFile={r}/log/slurmctld.log\n"
            f"SlurmdLogFile={r}/log/slurmd.log\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\nMpiDefault=none\n"
            f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n"
            f"AccountingStoragePort={self.ports['dbd']}\nAccountingStoragePass={r}/munge/munge.sock\n"
            "JobAcctGatherType=jobacct_gather/linux\n"
            "JobCompType=jobcomp/none\nReturnToService=2\nMinJobAge=300\nSchedulerParameters=sched_interval=2\n"
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mb} State=UNKNOWN\n"
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
        )

    # --- daemons -------------------------------------------------------------------------------------------

    def _spawn(self, *cmd: str, log: str) -> subprocess.Popen:
        out = open(self.root / "log" / log, "ab")  # noqa: SIM115 (the daemon keeps it open)
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.procs.append(proc)
        return proc

    def _run(self, *cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60)

    def _database(self) -> None:
        r = self.root
        subprocess.run(
            [_which("mariadb-install-db"), "--user=root", f"--datadir={r}/db", "--skip-test-db",
             "--auth-root-authentication-method=normal"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        self._spawn(
            _which("mariadbd"), "--no-defaults", "--user=root", f"--datadir={r}/db", f"--socket={r}/run/db.sock",
            f"--port={self.ports['db']}", "--bind-address=127.0.0.1", f"--pid-file={r}/run/db.pid",
            "--skip-grant-tables", "--innodb-buffer-pool-size=64M", log="mariadb.log",
        )  # fmt: skip
        _wait(lambda: (r / "run/db.sock").exists(), "MariaDB", r / "log/mariadb.log")

    def start(self) -> SlurmCluster:
        r = self.root
        self._write_configs()
        self._spawn(
            _which("munged"), "--foreground", "--force", f"--key-file={r}/munge/munge.key",
            f"--socket={r}/munge/munge.sock", f"--pid-file={r}/run/munged.pid", f"--log-file={r}/log/munged.log",
            f"--seed-file={r}/munge/munge.seed", log="munged.out",
        )  # fmt: skip
        _wait(lambda: (r / "munge/munge.sock").exists(), "munged", r / "log/munged.log")
        self._database()
        self._spawn(_which("slurmdbd"), "-D", log="slurmdbd.out")
        _wait(
            lambda: self._run("sacctmgr", "-n", "list", "cluster").returncode == 0, "slurmdbd", r / "log/slurmdbd.log"
        )
        for cmd in (
            ["add", "cluster", "pittest"],
            ["add", "account", ACCOUNT],
            ["add", "user", getpass.getuser(), f"account={ACCOUNT}", f"defaultaccount={ACCOUNT}"],
        ):
            self._run("sacctmgr", "-i", *cmd)
        self._spawn(_which("slurmctld"), "-D", "-i", log="slurmctld.out")
        self._spawn(_which("slurmd"), "-D", "-N", self.host, log="slurmd.out")
        _wait(self._node_idle, "the node", r / "log/slurmd.log")
        return self

    def _node_idle(self) -> bool:
        out = self._run("sinfo", "-h", "-o", "%t")
        return out.returncode == 0 and out.stdout.strip() in ("idle", "mix")

    def stop(self) -> None:
        self._run("scancel", "--user", getpass.getuser()) if self.procs else None
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    # --- queries -------------------------------------------------------------------------------------------

    def sacct(self) -> list[dict[str, str]]:
        """Every job of the accounting database: id, name, state, requested memory and time limit."""
        fields = ["JobIDRaw", "JobName", "State", "ReqMem", "Timelimit", "ReqCPUS"]
        out = self._run("sacct", "-X", "-n", "-P", "-a", f"--format={','.join(fields)}", "--starttime=now-1days")
        return [dict(zip(fields, line.split("|"))) for line in out.stdout.splitlines() if line]

    def __enter__(self) -> SlurmCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
