"""Publishing a run's LoRA to the Hugging Face Hub through ``huggingface_hub.HfApi``.

``stage`` writes exactly what will be sent into a folder of its own: each chosen format of
the chosen checkpoint (metadata without server paths), the sample images the card shows and
``README.md`` (the card), then reads every byte of it for a server path or the token
(``backend.publish.scrub.leaks``) and refuses when one is there. ``preview`` is the card
and the file list of a staging that is then thrown away: nothing is sent. ``publish``
checks the repository name, offline mode and the token before anything else, then
``create_repo`` and ``upload_folder`` (the Hub validates the card on commit). Every
refusal and failure is a ``PublishError`` carrying a message (``publish.*``): 401, 403,
the name taken (409), 404, another status, the network.

The token comes from the caller (kept in memory, passed to ``HfApi`` only) or from the
environment (``HF_TOKEN``, or huggingface_hub's own login); it is never written anywhere
and never part of a message.
"""
from __future__ import annotations

import importlib
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from backend.core import rundir
from backend.core.diskspace import size_text
from backend.core.messages import Msg
from backend.core.rundir import RunDir
from backend.publish import card as cards
from backend.publish.scrub import Secret, clean_safetensors, leaks, secrets_of

FORMATS = ("diffusers", "comfyui", "reference")
DEFAULT_FORMATS = FORMATS
DEFAULT_ENDPOINT = "https://huggingface.co"
CARD = "README.md"
# One part of a repository id, as the Hub allows it.
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
REPO_RE = re.compile(rf"^({_PART})/({_PART})$")
MAX_NAME = 96
OFFLINE_WORDS = ("1", "on", "yes", "true")


class PublishError(RuntimeError):
    """A refusal or a failure; ``args[0]`` is its message."""

    def __init__(self, message: Msg):
        super().__init__(message)
        self.message = message


@dataclass
class Staged:
    """What would be (or was) sent: the card's text and each file with its size."""
    repo_id: str
    card: str
    files: list[tuple[str, int]]
    checkpoint: str
    folder: Path | None = None


@dataclass
class Published:
    url: str
    commit_url: str | None
    files: list[tuple[str, int]] = field(default_factory=list)


# ---------------------------------------------------------------------------- checks
def check_repo_id(repo_id: str) -> str:
    """``owner/name`` as the Hub allows it, else a refusal naming the rules."""
    text = str(repo_id or "").strip()
    m = REPO_RE.match(text)
    if not m or ".." in text or "--" in text or len(m.group(2)) > MAX_NAME or \
            m.group(2).lower().endswith(".git"):
        raise PublishError(Msg("publish.repo_invalid", got=repr(text)))
    return text


def offline() -> bool:
    """Whether huggingface_hub's offline mode is on (``HF_HUB_OFFLINE`` as it is now, or as
    it was when the library was imported)."""
    now = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    if now.strip().lower() in OFFLINE_WORDS:
        return True
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) and "HF_HUB_OFFLINE" not in os.environ


def resolve_token(token: str | None) -> str:
    """The token given, else the environment's (``HF_TOKEN``, huggingface_hub's login)."""
    if token and token.strip():
        return token.strip()
    from huggingface_hub import get_token

    found = os.environ.get("HF_TOKEN") or get_token()
    if not found:
        raise PublishError(Msg("publish.no_token"))
    return found


def endpoint_of(endpoint: str | None) -> str:
    from huggingface_hub import constants

    return (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT
            or DEFAULT_ENDPOINT).rstrip("/")


def run_of(run_dir: str | os.PathLike) -> RunDir:
    rd = RunDir(Path(run_dir))
    if not rd.run_yaml.is_file():
        raise PublishError(Msg("publish.not_a_run", path=str(run_dir), file=rundir.RUN_YAML))
    return rd


def choose_checkpoint(rd: RunDir, name: str | None) -> Path:
    """The checkpoint ``name`` (a LoRA file in the run's output, or its EMA twin); the
    latest when None."""
    found = rd.checkpoints()
    if not found:
        raise PublishError(Msg("publish.no_checkpoint"))
    chosen = found[-1]
    found += [rundir.ema_twin(p) for p in found if rundir.ema_twin(p).exists()]
    by_name = {p.name: p for p in found}
    if name:
        wanted = name if name in by_name else f"{name}{rundir.CHECKPOINT_SUFFIX}"
        if wanted not in by_name:
            raise PublishError(Msg("publish.unknown_checkpoint", got=repr(name),
                                   allowed=list(by_name)))
        chosen = by_name[wanted]
    if chosen.is_dir():
        raise PublishError(Msg("publish.full_checkpoint", name=chosen.name))
    # A link out of the run would send a file of the server's that is not this run's.
    if chosen.is_symlink() or not chosen.resolve().is_relative_to(rd.run_dir.resolve()):
        raise PublishError(Msg("publish.checkpoint_outside", name=chosen.name))
    return chosen


def check_formats(formats: Iterable[str] | None) -> tuple[str, ...]:
    if isinstance(formats, str):
        formats = [formats]
    chosen = tuple(dict.fromkeys(formats if formats is not None else DEFAULT_FORMATS))
    if not chosen:
        raise PublishError(Msg("publish.no_format", allowed=list(FORMATS)))
    bad = [f for f in chosen if f not in FORMATS]
    if bad:
        raise PublishError(Msg("publish.unknown_format", got=bad, allowed=list(FORMATS)))
    return chosen


def file_name(fmt: str, repo_id: str) -> str:
    """A format's file in the repository: diffusers' default weight name (so
    ``load_lora_weights(repo)`` finds it), the others after the repository's name."""
    stem = repo_id.split("/")[-1]
    return {"diffusers": "pytorch_lora_weights.safetensors",
            "comfyui": f"{stem}_comfyui.safetensors"}.get(fmt, f"{stem}.safetensors")


# ---------------------------------------------------------------------------- staging
def _export(src: Path, fmt: str, tmp: Path) -> Path:
    """``src`` written as ``fmt`` in ``tmp`` (the reference format is the file itself)."""
    if fmt == "reference":
        return src
    from backend.models.export import export_lora  # torch: only when a format is converted

    try:
        return export_lora(src, fmt, out_dir=tmp)
    except (ValueError, OSError, KeyError, RuntimeError) as e:
        raise PublishError(Msg("publish.export_failed", fmt=fmt, why=str(e).splitlines()[0]
                               if str(e) else type(e).__name__)) from None


def stage(run_dir: str | os.PathLike, repo_id: str, dest: str | os.PathLike,
          formats: Iterable[str] | None = None, checkpoint: str | None = None,
          token: str | None = None) -> Staged:
    """Write into the empty folder ``dest`` exactly what ``publish`` sends; refuse when a
    byte of it holds a server path or ``token``."""
    repo_id = check_repo_id(repo_id)
    fmts = check_formats(formats)
    rd = run_of(run_dir)
    src = choose_checkpoint(rd, checkpoint)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    facts = cards.facts(rd, src.name)
    secrets = secrets_of(rd.run_dir, facts.settings, token) + \
        [Secret(str(dest.absolute()), Msg("publish.what_run_folder"))]
    weights: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="zerolora-export-") as tmp:
        for fmt in fmts:
            name = file_name(fmt, repo_id)
            clean_safetensors(_export(src, fmt, Path(tmp)), dest / name, secrets)
            weights[fmt] = name
    for row in facts.rows:
        for image, rel in row.images():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(image, dest / rel)
    sizes = {p.relative_to(dest).as_posix(): p.stat().st_size
             for p in dest.rglob("*") if p.is_file()}
    text = str(cards.build_card(facts, repo_id, weights, sizes, secrets))
    (dest / CARD).write_text(text, encoding="utf-8")
    found = leaks(dest, secrets)
    if found is not None:
        raise PublishError(Msg("publish.path_left", file=found[0], what=found[1]))
    files = sorted((p.relative_to(dest).as_posix(), p.stat().st_size)
                   for p in dest.rglob("*") if p.is_file())
    return Staged(repo_id, text, files, src.name, dest)


def preview(run_dir: str | os.PathLike, repo_id: str, formats: Iterable[str] | None = None,
            checkpoint: str | None = None, token: str | None = None) -> Staged:
    """The card and the files ``publish`` would send; nothing is sent or kept."""
    with tempfile.TemporaryDirectory(prefix="zerolora-publish-") as tmp:
        staged = stage(run_dir, repo_id, tmp, formats, checkpoint, token)
    staged.folder = None
    return staged


# ---------------------------------------------------------------------------- sending
def _transport_errors() -> tuple[type[BaseException], ...]:
    """The network's errors as huggingface_hub's HTTP client raises them (httpx2 in 2.x,
    httpx in 1.x, requests before), and the OS's."""
    found: list[type[BaseException]] = [OSError]
    for name in ("httpx2", "httpx", "requests"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        cls = getattr(mod, "TransportError", None) or \
            getattr(getattr(mod, "exceptions", None), "ConnectionError", None)
        if isinstance(cls, type):
            found.append(cls)
    return tuple(found)


@contextmanager
def hub_errors(repo_id: str, endpoint: str, token: str) -> Iterator[None]:
    """Each way the Hub or the network fails, as a ``PublishError`` that says why."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    def plain(e: BaseException) -> str:
        text = " ".join(str(e).split())[:300] or type(e).__name__
        return text.replace(token, "***") if token else text

    try:
        yield
    except OfflineModeIsEnabled:
        raise PublishError(Msg("publish.offline")) from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else None
        owner = repo_id.split("/")[0]
        if status == 401:
            raise PublishError(Msg("publish.unauthorized")) from None
        if status == 403:
            raise PublishError(Msg("publish.forbidden", repo=repo_id, owner=owner)) from None
        if status == 409:
            raise PublishError(Msg("publish.name_taken", repo=repo_id)) from None
        if status == 404:
            raise PublishError(Msg("publish.not_found", repo=repo_id)) from None
        raise PublishError(Msg("publish.http_failed", status=status, why=plain(e))) from None
    except _transport_errors() as e:
        raise PublishError(Msg("publish.network", endpoint=endpoint, why=plain(e))) from None
    except ValueError as e:  # the card, refused by the Hub's validation (its 400)
        raise PublishError(Msg("publish.card_invalid", why=plain(e))) from None


def publish(run_dir: str | os.PathLike, repo_id: str, *, token: str | None = None,
            private: bool = False, formats: Iterable[str] | None = None,
            checkpoint: str | None = None, existing: bool = False,
            endpoint: str | None = None, say: Callable[[Msg], None] | None = None
            ) -> Published:
    """Send the run's LoRA (``formats`` of ``checkpoint``, default the latest) with its card
    to ``repo_id``; ``existing``: add a commit to a repository that exists already (else a
    name taken is refused)."""
    say = say or (lambda m: None)
    repo_id = check_repo_id(repo_id)
    if offline():
        raise PublishError(Msg("publish.offline"))
    token = resolve_token(token)
    url_base = endpoint_of(endpoint)
    with tempfile.TemporaryDirectory(prefix="zerolora-publish-") as tmp:
        staged = stage(run_dir, repo_id, tmp, formats, checkpoint, token)
        from huggingface_hub import HfApi

        api = HfApi(endpoint=url_base, token=token, library_name="zerolora")
        with hub_errors(repo_id, url_base, token):
            say(Msg("publish.creating", repo=repo_id,
                    visibility="private" if private else "public"))
            url = api.create_repo(repo_id, private=private, exist_ok=existing,
                                  repo_type="model")
            say(Msg("publish.uploading", n=len(staged.files),
                    size=size_text(sum(n for _, n in staged.files))))
            commit = api.upload_folder(
                repo_id=repo_id, folder_path=tmp, repo_type="model",
                commit_message=f"Publish {staged.checkpoint} of run {Path(run_dir).name}",
                commit_description="Uploaded by ZeroLoRA: the LoRA, its model card and "
                                   "the card's sample images.")
    published = Published(str(url), getattr(commit, "commit_url", None), staged.files)
    say(Msg("publish.published", url=published.url))
    return published

