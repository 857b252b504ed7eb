"""A real single-node SLURM cluster on this machine, for the tests of ``backend.jobs.slurm``.

Debian's ``slurm-wlm`` and ``munge`` (``tests/run.sh`` installs them), started as root the way
``shared/reference/environment.md`` describes: ``munged`` as the ``munge`` user with the
package's key, then ``slurmctld -D`` and ``slurmd -D`` with a ``slurm.conf`` of our own in a
temporary folder (``SLURM_CONF`` points every client there; ``/etc/slurm`` is not touched).

The cluster: this machine as node ``$(hostname -s)`` (all its CPUs, partition ``debug``, the
default), and two GPU nodes that are declared but absent (``gpu[1-2]``, ``Gres=gpu:8``,
``State=CLOUD``, partition ``gpu``) so ``sbatch --test-only`` can judge a 2-node x 8-GPU
script. No accounting database: ended jobs are read from ``scontrol`` (``MinJobAge``) and
the job completion file (``JobCompType=jobcomp/filetxt``, ``sacct --completion``).

    with SlurmCluster(tmp) as cluster:   # or the session fixture ``slurm_cluster``
        cluster.run(["sinfo"])

The daemons this harness started are stopped by pid at the end (munged only when it was
not running before).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from backend.config.presets import load_preset
from backend.config.validation import validate

PACKAGES = "slurm-wlm munge"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "sinfo", "scancel",
           "scontrol", "sacct")
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
MUNGE_PID = Path("/run/munge/munged.pid")
START_TIMEOUT_S = 90.0
# Test ports, away from SLURM's defaults (6817/6818) so a cluster of the machine is untouched.
CTLD_PORT = 6917
SLURMD_PORT = 6918


def why_not() -> str | None:
    """Why a cluster cannot start here (None: it can)."""
    if os.geteuid() != 0:
        return "the SLURM tests start slurmctld, slurmd and munged as root (run them as root)"
    missing = [d for d in DAEMONS if not shutil.which(d, path="/usr/sbin:/usr/bin:/sbin:/bin")]
    if missing:
        return (f"SLURM is not installed ({', '.join(missing)} missing): "
                f"apt-get install -y {PACKAGES} (tests/run.sh does)")
    return None


def slurm_conf(folder: Path, host: str, cpus: int, memory_mb: int) -> str:
    return "\n".join([
        "ClusterName=zerolora",
        f"SlurmctldHost={host}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={CTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "AuthType=auth/munge",
        # A requeued job may start again once its old credentials expire (cred_expire + 1 s;
        # SLURM's default is 120 s): short here, so the requeue test waits seconds.
        "AuthInfo=cred_expire=20",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        "GresTypes=gpu",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=1",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={folder / 'jobcomp.txt'}",
        "JobAcctGatherType=jobacct_gather/none",
        "MinJobAge=600",
        "KillWait=10",
        "InactiveLimit=0",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        f"NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        # Cloud nodes are powered up on demand: the tests never submit to them (only
        # sbatch --test-only), so the programs that would do it do nothing.
        "PrivateData=cloud",  # powered-down cloud nodes are listed (scontrol, sinfo)
        "ResumeProgram=/bin/true",
        "SuspendProgram=/bin/true",
        "SuspendTime=3600",
        "ResumeTimeout=60",
        "NodeName=gpu[1-2] CPUs=64 RealMemory=512000 Gres=gpu:8 State=CLOUD",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
        "PartitionName=gpu Nodes=gpu[1-2] MaxTime=INFINITE State=UP",
        "",
    ])


class SlurmCluster:
    """munged + slurmctld + slurmd on this machine, configured in ``folder``."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.host = socket.gethostname().split(".")[0]
        self.conf = self.folder / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.procs: list[subprocess.Popen] = []
        self.munged_pid: int | None = None
        self._old_conf = os.environ.get("SLURM_CONF")

    # ------------------------------------------------------------------ helpers
    def run(self, argv: list[str], timeout: float = 30.0, check: bool = True
            ) -> subprocess.CompletedProcess:
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{argv} exited {proc.returncode}: {proc.stdout}{proc.stderr}")
        return proc

    def logs(self) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log"):
            p = self.folder / name
            if p.exists():
                out.append(f"--- {name}\n" + p.read_text(errors="replace")[-4000:])
        return "\n".join(out)

    # ------------------------------------------------------------------ start / stop
    def start(self) -> "SlurmCluster":
        self.folder.mkdir(parents=True, exist_ok=True)
        for sub in ("state", "spool"):
            (self.folder / sub).mkdir(exist_ok=True)
        # The folder must be reachable by the daemons and the job steps (root here).
        self.folder.chmod(0o755)
        memory_mb = min(8000, int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                                  / 2 ** 20 * 0.8))
        self.conf.write_text(slurm_conf(self.folder, self.host, os.cpu_count() or 1,
                                        memory_mb))
        self._start_munge()
        os.environ["SLURM_CONF"] = str(self.conf)  # the code under test reads it too
        self.procs.append(subprocess.Popen(
            ["slurmctld", "-D", "-i", "-f", str(self.conf)], env=self.env,
            stdout=subprocess.DEVNULL, stderr=open(self.folder / "slurmctld.err", "wb"),
            start_new_session=True))
        self._wait(lambda: self.run(["scontrol", "ping"], check=False).returncode == 0
                   and "UP" in self.run(["scontrol", "ping"], check=False).stdout,
                   "slurmctld answers scontrol ping")
        self.procs.append(subprocess.Popen(
            ["slurmd", "-D", "-f", str(self.conf)], env=self.env,
            stdout=subprocess.DEVNULL, stderr=open(self.folder / "slurmd.err", "wb"),
            start_new_session=True))
        self._wait(self._node_idle, f"node {self.host} idle in sinfo")
        return self

    def _node_idle(self) -> bool:
        out = self.run(["sinfo", "-h", "-N", "-n", self.host, "-o", "%T"], check=False).stdout
        return out.strip().startswith("idle")

    def _wait(self, ok, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead} exited while waiting for: {what}\n{self.logs()}")
            try:
                if ok():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"SLURM did not come up ({what}) in {START_TIMEOUT_S:g} s\n"
                           f"{self.logs()}")

    def _start_munge(self) -> None:
        probe = ["munge", "-n"]
        if shutil.which("munge") and subprocess.run(
                probe, capture_output=True).returncode == 0:
            return  # a munged runs already: use it, leave it be
        MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
        shutil.chown(MUNGE_SOCKET.parent, "munge", "munge")
        key = Path("/etc/munge/munge.key")
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            shutil.chown(key, "munge", "munge")
            key.chmod(0o400)
        subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True,
                       capture_output=True, timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if MUNGE_PID.exists() and MUNGE_PID.read_text().strip():
                self.munged_pid = int(MUNGE_PID.read_text().strip())
                if subprocess.run(probe, capture_output=True).returncode == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError("munged did not start (munge -n fails)")

    def stop(self) -> None:
        for job in self.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split():
            self.run(["scancel", job], check=False)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        self.procs.clear()
        if self.munged_pid:
            try:
                os.kill(self.munged_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            self.munged_pid = None
        if self._old_conf is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = self._old_conf

    def __enter__(self) -> "SlurmCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


_RUNNING: list[SlurmCluster] = []


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """The session's SLURM cluster (``SlurmCluster``); skipped, saying why, where one cannot
    start (not root, packages missing). Each test module that imports the fixture defines
    its own: the first starts the cluster, the others share it (one set of ports)."""
    reason = why_not()
    if reason:
        pytest.skip(reason)
    if _RUNNING:
        yield _RUNNING[0]
        return
    with SlurmCluster(tmp_path_factory.mktemp("slurm")) as cluster:
        _RUNNING.append(cluster)
        try:
            yield cluster
        finally:
            _RUNNING.clear()


def demo(tmp_path=None, **changes):
    """The CPU demo preset with ``changes`` (its dataset where the bundle has it)."""
    return validate({**load_preset("cpu_demo").to_dict(), **changes})
