"""Start the UI on this machine (development and the browser tests):

    python -m webui --workspace ./workspace --port 7860

Binds 127.0.0.1 only; ``launch.py`` is the full launcher (sign-in, other flags).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m webui")
    parser.add_argument("--workspace", default=os.environ.get("ZEROLORA_WORKSPACE",
                                                              "./workspace"))
    parser.add_argument("--models_dir", default=os.environ.get("ZEROLORA_MODELS_DIR"))
    parser.add_argument("--port", type=int, default=7860)
    args = parser.parse_args(argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

    from backend.jobs.runner import Runner
    from webui import security
    from webui.app import create_app, launch_kwargs

    workspace = Path(args.workspace).expanduser().resolve()
    workspace.mkdir(parents=True, exist_ok=True)
    # The watcher notices a vanished run supervisor with no browser open (Runner.watch).
    runner = Runner(workspace).watch()
    demo = create_app(runner, workspace, Path(args.models_dir) if args.models_dir else None)
    demo.queue(default_concurrency_limit=8)
    served = security.served_dir(workspace)
    served.mkdir(parents=True, exist_ok=True)
    try:
        demo.launch(server_name="127.0.0.1", server_port=args.port, show_error=True,
                    allowed_paths=[str(served)], ssr_mode=False, **launch_kwargs())
    finally:
        runner.close()


if __name__ == "__main__":
    main()
