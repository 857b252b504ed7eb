#!/usr/bin/env python3
"""Install (first time) and start the ZeroLoRA web UI.

    python3 launch.py                          # http://127.0.0.1:7860, this machine only
    python3 launch.py --auth-file users.txt --admin alice --host 0.0.0.0
    python3 launch.py --hash-password alice    # prints a line for --auth-file

On a fresh machine it creates ``.venv`` when the dependencies are not importable, installs
torch (on machines without an NVIDIA GPU the CPU build, ``torch==2.13.0``, first) and
requirements.txt into it, and restarts itself inside it (``--no-bootstrap`` or
ZEROLORA_NO_BOOTSTRAP=1 turns that off).

Safe by default: it listens on 127.0.0.1 only. Listening on another address or making a
public share link needs sign-in (``--auth`` / ``--auth-file``); without it the launcher
exits before binding anything, unless ``--insecure`` is given. Passwords are kept as salted
hashes in memory and never printed. The UI process makes no calls to model hubs and sends no
analytics; files leave the server only through the run registry
(``webui/security/registry.py``).
"""
from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from webui import security  # noqa: E402  (standard library only)

# Import names of what the app and its stages need (find_spec only: nothing is imported).
REQUIRED_MODULES = ("torch", "accelerate", "deepspeed", "diffusers", "transformers", "peft",
                    "safetensors", "huggingface_hub", "modelscope", "gradio", "gradio_client",
                    "pydantic", "yaml", "PIL", "numpy", "psutil", "tensorboard")
CPU_TORCH = "torch==2.13.0"
LANGS = ("en", "zh")
EXECUTORS = ("local", "slurm")
EXIT_UNSAFE = 2
EXIT_NO_SLURM = 3


def say(message: str) -> None:
    print(f"[zerolora] {message}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="launch.py", allow_abbrev=False,
        description="Start the ZeroLoRA web UI (installs the dependencies on first use).")
    p.add_argument("--host", default="127.0.0.1",
                   help="Address to listen on (default 127.0.0.1: this machine only). Any "
                        "other address needs --auth/--auth-file or --insecure.")
    p.add_argument("--port", type=int, default=int(os.environ.get("ZEROLORA_PORT", 7860)),
                   help="Port (default 7860).")
    p.add_argument("--workspace", default=os.environ.get("ZEROLORA_WORKSPACE", "./workspace"),
                   help="Folder for runs, datasets, presets and the run history "
                        "(default ./workspace).")
    p.add_argument("--models-dir", default=os.environ.get("ZEROLORA_MODELS_DIR"),
                   help="Folder of downloaded models (default ./models).")
    p.add_argument("--auth", action="append", default=[], metavar="USER:PASS",
                   help="A user who may sign in (repeatable). Command lines are visible to "
                        "other users of this machine: prefer --auth-file.")
    p.add_argument("--auth-file", metavar="FILE",
                   help="One user:password per line; the password may be a hash printed by "
                        "--hash-password.")
    p.add_argument("--admin", action="append", default=[], metavar="USER",
                   help="A signed-in user who sees and manages every user's runs "
                        "(repeatable).")
    p.add_argument("--share", action="store_true",
                   help="Also make a temporary public link (needs internet and sign-in).")
    p.add_argument("--root-path", default=os.environ.get("ZEROLORA_ROOT_PATH"),
                   help="URL prefix when served behind a reverse proxy, e.g. /zerolora.")
    p.add_argument("--trusted-proxy", action="append", default=[], metavar="ADDRESS",
                   help="Address (or network, e.g. 10.0.0.0/8) of a reverse proxy whose "
                        "X-Forwarded-For is believed (repeatable). Without it the client "
                        "address is the connection's, for everyone.")
    q = security.Quotas()
    p.add_argument("--quota-upload-mb", type=float, default=q.upload_bytes / (1 << 20),
                   help="Per signed-in non-admin user: the most one upload may unpack, in "
                        "MiB (default %(default)g); also the framework's upload limit.")
    p.add_argument("--quota-datasets-gb", type=float, default=q.datasets_bytes / (1 << 30),
                   help="Per user: all their dataset folders together, in GiB (default "
                        "%(default)g).")
    p.add_argument("--quota-datasets", type=int, default=q.datasets_count,
                   help="Per user: how many dataset folders (default %(default)d).")
    p.add_argument("--quota-cache-gb", type=float, default=q.cache_bytes / (1 << 30),
                   help="Per user: the stage-1 caches of their runs, in GiB; no new run "
                        "starts beyond it (default %(default)g).")
    p.add_argument("--upload-ttl-hours", type=float, default=q.upload_ttl_s / 3600,
                   help="Raw uploads are removed from the server this long after they "
                        "arrived (default %(default)g).")
    p.add_argument("--insecure", action="store_true",
                   help="Allow listening on other addresses or sharing WITHOUT sign-in "
                        "(anyone who can reach the port can train, read and delete runs).")
    p.add_argument("--executor", choices=EXECUTORS,
                   default=os.environ.get("ZEROLORA_EXECUTOR") or "local",
                   help="Where runs' stages run: local (default: this machine's own queue "
                        "and GPUs) or slurm (every run becomes one sbatch job on the SLURM "
                        "cluster this machine submits to; the workspace must be on storage "
                        "the nodes share). Also ZEROLORA_EXECUTOR.")
    p.add_argument("--slurm-partition", default=os.environ.get("ZEROLORA_SLURM_PARTITION"),
                   metavar="NAME",
                   help="With --executor slurm: the partition of runs that name none "
                        "(default: the cluster's default partition).")
    p.add_argument("--slurm-setup", action="append", default=[], metavar="LINE",
                   help="With --executor slurm: a shell line every job runs before its "
                        "stages, e.g. 'module load cuda/12.4' or 'source /shared/venv/bin/"
                        "activate' (repeatable; set by the admin, never by users).")
    p.add_argument("--lang", choices=LANGS, default=os.environ.get("ZEROLORA_LANG") or None,
                   help="Interface language (default: the browser's).")
    p.add_argument("--no-bootstrap", action="store_true",
                   default=os.environ.get("ZEROLORA_NO_BOOTSTRAP", "") not in ("", "0"),
                   help="Never create .venv or install packages (also ZEROLORA_NO_BOOTSTRAP=1).")
    p.add_argument("--hash-password", metavar="USER",
                   help="Read a password (twice, not echoed) and print a user:hash line for "
                        "--auth-file, then exit.")
    return p


# ----------------------------------------------------------------------------- exposure
def is_loopback(host: str) -> bool:
    """Only 127.0.0.0/8, ::1 and 'localhost' count; 0.0.0.0, :: and names do not."""
    host = (host or "").strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_problem(host: str, share: bool, has_auth: bool, insecure: bool) -> str | None:
    """Why this launch would expose the app to others without sign-in (None: it is fine)."""
    if has_auth or insecure:
        return None
    if share:
        return ("--share makes a public link, and nobody would need to sign in.\n"
                "  Pass --auth USER:PASS or --auth-file FILE (one user:password per line), or "
                "--insecure if you really want an open app.")
    if not is_loopback(host):
        return (f"--host {host} would let other machines reach the app, and nobody would "
                f"need to sign in.\n"
                f"  Pass --auth USER:PASS or --auth-file FILE (one user:password per line), "
                f"or --insecure if you really want an open app; --host 127.0.0.1 keeps it on "
                f"this machine.")
    return None


def credentials(args: argparse.Namespace) -> security.Credentials | None:
    """Users from --auth and --auth-file as salted hashes (None: sign-in off)."""
    pairs: list[tuple[str, str]] = []
    for i, item in enumerate(args.auth, 1):
        pairs.append(security.parse_auth_line(item, f"--auth #{i}"))
    if args.auth_file:
        pairs += security.load_auth_file(args.auth_file)
    if not pairs:
        return None
    creds = security.Credentials()
    for user, secret in pairs:
        creds.add(user, secret)
    return creds


# ----------------------------------------------------------------------------- bootstrap
def missing_modules(names: tuple[str, ...] = REQUIRED_MODULES) -> list[str]:
    out = []
    for name in names:
        try:
            if importlib.util.find_spec(name) is None:
                out.append(name)
        except (ImportError, ValueError):
            out.append(name)
    return out


def venv_dir() -> Path:
    return Path(os.environ.get("ZEROLORA_VENV") or ROOT / ".venv")


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def has_nvidia_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def install_commands(python: Path, cpu_only: bool) -> list[list[str]]:
    """The pip commands that fill a fresh venv (argv lists; run in this order)."""
    pip = [str(python), "-m", "pip", "install"]
    cmds = [pip + ["--upgrade", "pip"]]
    if cpu_only:
        # A plain torch requirement resolves to a multi-GB CUDA build; the CPU build first,
        # then requirements.txt's range is already satisfied.
        cmds.append(pip + [CPU_TORCH])
    cmds.append(pip + ["-r", str(ROOT / "requirements.txt")])
    return cmds


def venv_ready(python: Path) -> bool:
    probe = ("import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None "
             f"for m in {list(REQUIRED_MODULES)!r}))")
    try:
        return subprocess.run([str(python), "-c", probe], cwd=str(ROOT),
                              stdin=subprocess.DEVNULL).returncode == 0
    except OSError:
        return False


def bootstrap(argv: list[str], no_bootstrap: bool) -> None:
    """Return when the dependencies import here; else set up .venv and re-exec inside it."""
    missing = missing_modules()
    if not missing:
        return
    how = (f"{sys.executable} -m pip install {CPU_TORCH} (CPU machines), then "
           f"{sys.executable} -m pip install -r requirements.txt")
    if no_bootstrap:
        say(f"missing Python packages: {', '.join(missing)}.\n  Install them with: {how}\n"
            f"  or run without --no-bootstrap to install them into .venv.")
        sys.exit(1)
    if os.environ.get("ZEROLORA_BOOTSTRAPPED") == "1":
        say(f"still missing after installing into {venv_dir()}: {', '.join(missing)}.\n"
            f"  Install them with: {how}")
        sys.exit(1)
    venv = venv_dir()
    python = venv_python(venv)
    if not python.exists():
        say(f"first start: creating {venv} (then installing the dependencies; this takes a "
            f"few minutes)")
        if subprocess.run([sys.executable, "-m", "venv", str(venv)]).returncode != 0:
            say(f"could not create {venv} (on Debian/Ubuntu: apt-get install python3-venv), "
                f"or install the packages yourself: {how}")
            sys.exit(1)
    if not venv_ready(python):
        for cmd in install_commands(python, cpu_only=not has_nvidia_gpu()):
            say("running: " + " ".join(cmd[1:]))
            if subprocess.run(cmd, cwd=str(ROOT)).returncode != 0:
                say("installing failed (see pip's message above); fix it and run "
                    "python3 launch.py again")
                sys.exit(1)
    env = dict(os.environ, ZEROLORA_BOOTSTRAPPED="1")
    say(f"starting inside {venv}")
    sys.stdout.flush()
    os.execve(str(python), [str(python), str(ROOT / "launch.py"), *argv], env)


def ui_process_env(workspace: Path) -> None:
    """Settings for this UI process: no analytics, no telemetry, a private gradio cache.

    HF_HUB_OFFLINE is not exported: the stages inherit this environment and may need to
    download models (their config's ``offline`` decides); the UI process itself makes no
    hub calls.
    """
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ.setdefault("DO_NOT_TRACK", "1")
    if not os.environ.get("GRADIO_TEMP_DIR"):
        # gradio's default /tmp/gradio is shared by every user of the machine.
        cache = workspace / ".gradio"
        cache.mkdir(parents=True, exist_ok=True)
        os.chmod(cache, 0o700)
        os.environ["GRADIO_TEMP_DIR"] = str(cache)


# ----------------------------------------------------------------------------- main
def hash_password_command(user: str) -> int:
    import getpass

    if not security.USER_NAME.match(user):
        say(f"--hash-password: user name must be letters, digits, _ . @ - (got {user!r})")
        return 2
    if sys.stdin.isatty():
        first = getpass.getpass(f"password for {user}: ")
        if getpass.getpass("again: ") != first:
            say("the passwords differ")
            return 1
    else:
        first = sys.stdin.readline().rstrip("\n")
    if not first:
        say("empty password")
        return 1
    print(f"{user}:{security.hash_password(first)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.hash_password:
        return hash_password_command(args.hash_password)
    if not 1 <= args.port <= 65535:
        say(f"--port: must be 1..65535 (got {args.port})")
        return EXIT_UNSAFE
    if args.root_path and not re.match(r"^/[A-Za-z0-9._~/-]*$", args.root_path):
        say(f"--root-path: a URL path starting with / (got {args.root_path!r})")
        return EXIT_UNSAFE
    try:
        creds = credentials(args)
    except ValueError as e:
        say(str(e))
        return EXIT_UNSAFE
    # Refuse an open, exposed app before anything is installed, imported or bound.
    problem = exposure_problem(args.host, args.share, creds is not None, args.insecure)
    if problem:
        say("refusing to start: " + problem)
        return EXIT_UNSAFE
    if args.admin:
        if creds is None:
            say("--admin: needs sign-in (--auth or --auth-file); without it the one local "
                "user already sees every run")
            return EXIT_UNSAFE
        unknown = [a for a in args.admin if a not in creds.hashes]
        if unknown:
            say(f"--admin: not a user of --auth/--auth-file (got {', '.join(unknown)})")
            return EXIT_UNSAFE
    if creds is None and (args.share or not is_loopback(args.host)):
        say("WARNING: --insecure: anyone who can reach this app can start, read and delete "
            "runs")
    elif creds is not None and not is_loopback(args.host):
        say("note: passwords cross the network in clear text unless a TLS reverse proxy "
            "fronts this app (see --root-path)")

    bootstrap(argv, args.no_bootstrap)

    workspace = Path(args.workspace).expanduser().resolve()
    workspace.mkdir(parents=True, exist_ok=True)
    models_dir = Path(args.models_dir).expanduser().resolve() if args.models_dir else None
    ui_process_env(workspace)
    if models_dir is not None:
        os.environ["ZEROLORA_MODELS_DIR"] = str(models_dir)  # the stages' default too
    if args.lang:
        os.environ["ZEROLORA_LANG"] = args.lang
    security.configure(auth_enabled=creds is not None, admins=args.admin)
    try:
        security.configure_quotas(**quota_settings(args))
    except ValueError as e:
        say(str(e))
        return EXIT_UNSAFE
    # Forwarded client addresses count only from the proxies named here (uvicorn reads it).
    os.environ["FORWARDED_ALLOW_IPS"] = ",".join(args.trusted_proxy)
    return serve(args, workspace, models_dir, creds)


def quota_settings(args: argparse.Namespace) -> dict:
    """The per-user quotas of these flags (``webui.security.quota.Quotas`` fields)."""
    problems = [f"--{name.replace('_', '-')}: must be positive (got {value})"
                for name, value in vars(args).items()
                if (name.startswith("quota_") or name == "upload_ttl_hours") and value <= 0]
    if problems:
        raise ValueError("; ".join(problems))
    return {"upload_bytes": int(args.quota_upload_mb * (1 << 20)),
            "datasets_bytes": int(args.quota_datasets_gb * (1 << 30)),
            "datasets_count": args.quota_datasets,
            "cache_bytes": int(args.quota_cache_gb * (1 << 30)),
            "upload_ttl_s": args.upload_ttl_hours * 3600}


def launch_settings(args: argparse.Namespace, workspace: Path, models_dir: Path | None,
                    creds: security.Credentials | None) -> dict:
    """Keyword arguments of ``Blocks.launch`` for these flags (files: see webui/security)."""
    served = security.served_dir(workspace)
    served.mkdir(parents=True, exist_ok=True)
    blocked = [str(workspace / n) for n in security.DB_NAMES]
    if models_dir is not None:
        blocked.append(str(models_dir))
    local_only = is_loopback(args.host) and not args.share
    from starlette.middleware import Middleware

    # No route list for anyone (gradio's API docs stay behind sign-in); signed-out visitors
    # get the login page without the API description in it.
    app_kwargs: dict = {"openapi_url": None}
    if creds is not None:
        app_kwargs["middleware"] = [Middleware(security.LoginWall, limiter=creds.limiter,
                                               served_root=served,
                                               served_ttl_s=security.SERVED_TTL_S)]
    return dict(
        server_name=args.host, server_port=args.port, share=args.share,
        auth=creds.check_async if creds is not None else None,
        auth_message=security.login_message(creds) if creds is not None else None,
        # Only copies of checked files under random names: never the repo, the workspace
        # root, the models folder or other users' exports.
        allowed_paths=[str(served)], blocked_paths=blocked,
        root_path=args.root_path or None,
        max_file_size=security.quotas().upload_bytes if creds is not None else None,
        show_error=local_only, ssr_mode=False, enable_monitoring=False, mcp_server=False,
        # run_history would keep every call's inputs (a typed hub token too) in the browser.
        pwa=False, run_history=False, app_kwargs=app_kwargs, quiet=False,
        prevent_thread_lock=True)


def start_sweeper(workspace: Path) -> None:
    """Every minute (or half the upload time, when shorter): expired downloads and raw
    uploads past their time leave the server."""
    import threading

    every_s = min(60.0, security.quotas().upload_ttl_s / 2)

    def sweep():
        while True:
            try:
                security.expire_downloads(workspace)
                security.expire_uploads(security.gradio_cache(workspace),
                                        keep=security.served_dir(workspace))
            except OSError:
                pass
            time.sleep(every_s)

    threading.Thread(target=sweep, daemon=True, name="zerolora-sweeper").start()


def slurm_runner(args: argparse.Namespace, workspace: Path):
    """The app's runner for ``--executor slurm`` (``backend.jobs.slurm_runs``), or None
    after saying why runs cannot go to SLURM from here (no ``sbatch`` on the PATH)."""
    from backend.jobs.slurm import SlurmExecutor, SlurmOptions
    from backend.jobs.slurm_runs import SlurmRunner

    missing = SlurmExecutor.available()
    if missing is not None:
        say(str(missing))
        return None
    server = SlurmOptions(partition=args.slurm_partition or None,
                          setup_lines=list(args.slurm_setup))
    problems = server.problems()
    if problems:
        say("; ".join(str(p) for p in problems))
        return None
    say(f"runs go to SLURM (partition {args.slurm_partition or 'the default'}); the "
        f"workspace {workspace} must be on storage the nodes share")
    return SlurmRunner(workspace, executor="slurm", server=server)


def serve(args: argparse.Namespace, workspace: Path, models_dir: Path | None,
          creds: security.Credentials | None) -> int:
    import inspect

    from backend.jobs.runner import Runner
    from webui import app as webapp

    # The watcher notices a vanished run supervisor with no browser open (Runner.watch);
    # with --executor slurm it also follows the runs' SLURM jobs.
    if args.executor == "slurm":
        runner = slurm_runner(args, workspace)
        if runner is None:
            return EXIT_NO_SLURM
        runner.probe_storage()  # a tiny job checks the nodes share the runs folder
    else:
        runner = Runner(workspace)
    runner.watch()
    kwargs = {}
    if args.lang and "lang" in inspect.signature(webapp.create_app).parameters:
        kwargs["lang"] = args.lang
    demo = webapp.create_app(runner, workspace, models_dir, user_getter=security.user_of,
                             **kwargs)
    demo.queue(default_concurrency_limit=8)
    settings = launch_settings(args, workspace, models_dir, creds)
    extra = webapp.launch_kwargs() if hasattr(webapp, "launch_kwargs") else {}
    demo.launch(**{**extra, **settings})
    start_sweeper(workspace)
    local = f"http://{args.host}:{demo.server_port}{args.root_path or ''}/"
    if creds is not None:
        say(f"sign-in on for {len(creds)} user(s); admins: {', '.join(args.admin) or 'none'}")
    if args.share and not demo.share_url:
        say(f"could not create a public share link (no internet, or the share service is "
            f"unreachable). ZeroLoRA keeps serving locally at {local}")
    say(f"serving at {local} (workspace {workspace}); Ctrl+C stops")
    try:
        demo.block_thread()
    except KeyboardInterrupt:
        pass
    finally:
        runner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
