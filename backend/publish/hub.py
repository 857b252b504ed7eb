"""Publishing a run's LoRA, or a full fine-tune's checkpoint, to a model hub: the Hugging
Face Hub through ``huggingface_hub.HfApi``, or ModelScope through its own client
(``modelscope.hub.api.HubApi``). ``destination`` names the hub (``DESTINATIONS``).

``stage`` writes exactly what will be sent into a folder of its own: each chosen format of
the chosen checkpoint (metadata without server paths), the sample images the card shows and
``README.md`` (the card, in the destination's metadata), then reads every byte of it for a
server path or the token (``backend.publish.scrub.leaks``) and refuses when one is there.
A full fine-tune's checkpoint (a folder ``step-N/``) is published as the Runs tab downloads
it: ``diffusers`` its folder (config and shards, under the trained component's name),
``comfyui`` / ``reference`` one file each (``backend.models.full_export``, streamed); the
free space is checked first. ``preview`` is the card and the file list of a staging that is
then thrown away: nothing is sent. ``publish`` checks the repository name, offline mode and
the token before anything else, then creates the repository and uploads the folder. Every
refusal and failure is a ``PublishError`` carrying a message (``publish.*``): 401, 403, the
name taken, 404, another status, the network; each can be tried again (``existing`` adds to
a repository created by an earlier try).

The token comes from the caller (kept in memory, passed to the client only) or from the
environment (``HF_TOKEN`` or huggingface_hub's own login; ``MODELSCOPE_API_TOKEN``); it is
never written anywhere and never part of a message. The ModelScope endpoint is
``MODELSCOPE_ENDPOINT`` (or the older ``MODELSCOPE_DOMAIN``), else ModelScope's own.
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
from backend.families import family_names, family_spec
from backend.models.full import INFO_NAME
from backend.models.full_export import FullExportError, checkpoint_tensors, export_full
from backend.publish import card as cards
from backend.publish.card import HUGGINGFACE, MODELSCOPE
from backend.publish.scrub import Secret, clean_json, clean_safetensors, leaks, secrets_of

FORMATS = ("diffusers", "comfyui", "reference")
DEFAULT_FORMATS = FORMATS
DESTINATIONS = (HUGGINGFACE, MODELSCOPE)
DEFAULT_DESTINATION = HUGGINGFACE
DEFAULT_ENDPOINT = "https://huggingface.co"
MS_TOKEN_ENV = "MODELSCOPE_API_TOKEN"
# ModelScope's client reads these, the first set wins (``modelscope_hub.config``).
MS_ENDPOINT_ENVS = ("MODELSCOPE_ENDPOINT", "MODELSCOPE_DOMAIN")
# Attempts of each ModelScope request on a dropped connection or a 5xx (its client's own
# retry, with backoff).
MS_RETRIES = 3
# Room left on the disk beyond the staged files.
DISK_MARGIN = 64 * 2**20
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
    license: str | None = None  # the base model's, when its card says it


@dataclass
class Published:
    url: str
    commit_url: str | None
    files: list[tuple[str, int]] = field(default_factory=list)


# ---------------------------------------------------------------------------- checks
def check_destination(destination: str | None) -> str:
    """The hub to publish to (None: the Hugging Face Hub), else a refusal naming those
    known."""
    chosen = str(destination or DEFAULT_DESTINATION).strip().lower()
    if chosen not in DESTINATIONS:
        raise PublishError(Msg("publish.unknown_destination", got=repr(destination),
                               allowed=list(DESTINATIONS)))
    return chosen


def check_repo_id(repo_id: str, destination: str = DEFAULT_DESTINATION) -> str:
    """``owner/name`` as both hubs allow it, else a refusal naming the rules."""
    text = str(repo_id or "").strip()
    m = REPO_RE.match(text)
    if not m or ".." in text or "--" in text or len(m.group(2)) > MAX_NAME or \
            m.group(2).lower().endswith(".git"):
        if destination == MODELSCOPE:
            raise PublishError(Msg("publish.ms_repo_invalid", got=repr(text)))
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


def resolve_token(token: str | None, destination: str = DEFAULT_DESTINATION) -> str:
    """The token given, else the environment's (``HF_TOKEN``, huggingface_hub's login;
    ``MODELSCOPE_API_TOKEN``)."""
    if token and token.strip():
        return token.strip()
    if destination == MODELSCOPE:
        found = (os.environ.get(MS_TOKEN_ENV) or "").strip()
        if not found:
            raise PublishError(Msg("publish.ms_no_token"))
        return found
    from huggingface_hub import get_token

    found = os.environ.get("HF_TOKEN") or get_token()
    if not found:
        raise PublishError(Msg("publish.no_token"))
    return found


def endpoint_of(endpoint: str | None, destination: str = DEFAULT_DESTINATION) -> str:
    """The hub's address: the one given, else the environment's, else the hub's own."""
    if destination == MODELSCOPE:
        found = endpoint or next((os.environ[k].strip() for k in MS_ENDPOINT_ENVS
                                  if (os.environ.get(k) or "").strip()), None)
        if not found:
            try:
                from modelscope_hub.constants import DEFAULT_ENDPOINT as MS_DEFAULT
            except ImportError:
                raise PublishError(Msg("publish.ms_missing")) from None
            found = MS_DEFAULT
        if not found.lower().startswith(("http://", "https://")):
            found = f"https://{found}"
        return found.rstrip("/")
    from huggingface_hub import constants

    return (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT
            or DEFAULT_ENDPOINT).rstrip("/")


def run_of(run_dir: str | os.PathLike) -> RunDir:
    rd = RunDir(Path(run_dir))
    if not rd.run_yaml.is_file():
        raise PublishError(Msg("publish.not_a_run", path=str(run_dir), file=rundir.RUN_YAML))
    return rd


def repo_url(repo_id: str, destination: str = DEFAULT_DESTINATION,
             endpoint: str | None = None) -> str:
    """Where ``repo_id`` is (or would be) on the hub: ModelScope's pages are under
    ``/models/``."""
    base = endpoint_of(endpoint, destination)
    return f"{base}/models/{repo_id}" if destination == MODELSCOPE else f"{base}/{repo_id}"


def choose_checkpoint(rd: RunDir, name: str | None) -> Path:
    """The checkpoint ``name`` (a LoRA file in the run's output or a full fine-tune's
    folder, or its EMA twin); the latest when None."""
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
    if chosen.is_dir() and not rundir.is_full_checkpoint(chosen):
        raise PublishError(Msg("publish.unknown_checkpoint", got=repr(chosen.name),
                               allowed=list(by_name)))
    # A link out of the run would send a file of the server's that is not this run's.
    inside = rd.run_dir.resolve()
    parts = [chosen] + (sorted(chosen.rglob("*")) if chosen.is_dir() else [])
    if any(p.is_symlink() or not p.resolve().is_relative_to(inside) for p in parts):
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


def component_of(family: str) -> str:
    """The folder a full checkpoint's diffusers layout goes to: its trained component's
    name, as in the base model's own repository (``subfolder=`` of ``from_pretrained``)."""
    return family_spec(family).trained_component if family in family_names() \
        else "transformer"


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _check_space(src: Path, fmts: tuple[str, ...], dest: Path) -> None:
    """Refuse before a byte is staged when ``dest``'s disk cannot hold every format of
    ``src`` (each about its size) and one export in the making."""
    size = _folder_bytes(src) if src.is_dir() else src.stat().st_size
    converted = {"comfyui", "reference"} if src.is_dir() else {"diffusers", "comfyui"}
    needed = size * (len(fmts) + (1 if converted & set(fmts) else 0))
    free = shutil.disk_usage(dest).free
    if free < needed + DISK_MARGIN:
        raise PublishError(Msg("publish.no_space", needed=size_text(needed + DISK_MARGIN),
                               free=size_text(free)))


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


def _stage_full(src: Path, fmt: str, name: str, dest: Path, tmp: Path, family: str,
                secrets: list[Secret]) -> None:
    """One format of the full checkpoint folder ``src`` into ``dest`` as ``name`` (a folder
    for ``diffusers``): its config and shards without server paths (its own record,
    ``zerolora_checkpoint.json``, stays behind), or the file ``export_full`` streams."""
    try:
        if fmt == "diffusers":
            (dest / name).mkdir(parents=True, exist_ok=True)
            for p in sorted(src.iterdir()):
                if not p.is_file() or p.name == INFO_NAME or p.name.startswith("."):
                    continue
                if p.suffix == ".safetensors":
                    clean_safetensors(p, dest / name / p.name, secrets)
                elif p.suffix == ".json":
                    clean_json(p, dest / name / p.name, secrets)
            return
        out = export_full(src, fmt, tmp / f"{src.name}.{fmt}.safetensors", family=family,
                          log=lambda _: None)
        clean_safetensors(out, dest / name, secrets)
        out.unlink()
    except FullExportError as e:
        raise PublishError(Msg("publish.export_failed", fmt=fmt,
                               why=str(e.problems[0]) if e.problems else "")) from None
    except (ValueError, OSError, KeyError) as e:
        raise PublishError(Msg("publish.export_failed", fmt=fmt, why=str(e).splitlines()[0]
                               if str(e) else type(e).__name__)) from None


def _full_sizes(src: Path, fmt: str, name: str) -> dict[str, int]:
    """The files one format of the full checkpoint ``src`` would be, by path in the
    repository, with their sizes (an export's: its tensors' bytes, the header aside),
    without writing them."""
    if fmt == "diffusers":
        return {f"{name}/{p.name}": p.stat().st_size for p in sorted(src.iterdir())
                if p.is_file() and p.name != INFO_NAME and not p.name.startswith(".")
                and p.suffix in (".safetensors", ".json")}
    try:
        tensors = checkpoint_tensors(src)
    except FullExportError as e:
        raise PublishError(Msg("publish.export_failed", fmt=fmt,
                               why=str(e.problems[0]) if e.problems else "")) from None
    return {name: sum(t.end - t.start for t in tensors.values())}


def stage(run_dir: str | os.PathLike, repo_id: str, dest: str | os.PathLike,
          formats: Iterable[str] | None = None, checkpoint: str | None = None,
          token: str | None = None, destination: str = DEFAULT_DESTINATION,
          plan_only: bool = False) -> Staged:
    """Write into the empty folder ``dest`` exactly what ``publish`` sends to
    ``destination``; refuse when a byte of it holds a server path or ``token``.
    ``plan_only`` (a preview): a full checkpoint's weights are sized, not written (the
    card, the images and a LoRA's files are written and read as for sending)."""
    destination = check_destination(destination)
    repo_id = check_repo_id(repo_id, destination)
    fmts = check_formats(formats)
    rd = run_of(run_dir)
    src = choose_checkpoint(rd, checkpoint)
    full = src.is_dir()
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    planned: dict[str, int] = {}
    if not (full and plan_only):
        _check_space(src, fmts, dest)
    facts = cards.facts(rd, src.name)
    secrets = secrets_of(rd.run_dir, facts.settings, token) + \
        [Secret(str(dest.absolute()), Msg("publish.what_run_folder"))]
    weights: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="zerolora-export-", dir=dest.parent) as tmp:
        for fmt in fmts:
            if full:
                name = component_of(facts.family) if fmt == "diffusers" else \
                    file_name(fmt, repo_id)
                if plan_only:
                    planned.update(_full_sizes(src, fmt, name))
                else:
                    _stage_full(src, fmt, name, dest, Path(tmp), facts.family, secrets)
                weights[fmt] = f"{name}/" if fmt == "diffusers" else name
                continue
            name = file_name(fmt, repo_id)
            clean_safetensors(_export(src, fmt, Path(tmp)), dest / name, secrets)
            weights[fmt] = name
    for row in facts.rows:
        for image, rel in row.images():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(image, dest / rel)
    sizes = {p.relative_to(dest).as_posix(): p.stat().st_size
             for p in dest.rglob("*") if p.is_file()} | planned
    text = cards.build_card(facts, repo_id, weights, sizes, secrets, destination, full)
    (dest / CARD).write_text(text, encoding="utf-8")
    found = leaks(dest, secrets)
    if found is not None:
        raise PublishError(Msg("publish.path_left", file=found[0], what=found[1]))
    files = sorted(({p.relative_to(dest).as_posix(): p.stat().st_size
                     for p in dest.rglob("*") if p.is_file()} | planned).items())
    return Staged(repo_id, text, files, src.name, dest, facts.license)


def preview(run_dir: str | os.PathLike, repo_id: str, formats: Iterable[str] | None = None,
            checkpoint: str | None = None, token: str | None = None,
            destination: str = DEFAULT_DESTINATION) -> Staged:
    """The card and the files ``publish`` would send; nothing is sent or kept (a full
    checkpoint's weights are sized, not written)."""
    with tempfile.TemporaryDirectory(prefix="zerolora-publish-") as top:
        staged = stage(run_dir, repo_id, Path(top) / "repo", formats, checkpoint, token,
                       destination, plan_only=True)
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
            endpoint: str | None = None, destination: str = DEFAULT_DESTINATION,
            say: Callable[[Msg], None] | None = None) -> Published:
    """Send the run's LoRA or full checkpoint (``formats`` of ``checkpoint``, default the
    latest) with its card to ``repo_id`` on ``destination``; ``existing``: add a commit to a
    repository that exists already (else a name taken is refused)."""
    say = say or (lambda m: None)
    destination = check_destination(destination)
    repo_id = check_repo_id(repo_id, destination)
    if destination == HUGGINGFACE and offline():
        raise PublishError(Msg("publish.offline"))
    token = resolve_token(token, destination)
    url_base = endpoint_of(endpoint, destination)
    with tempfile.TemporaryDirectory(prefix="zerolora-publish-") as top:
        folder = Path(top) / "repo"
        staged = stage(run_dir, repo_id, folder, formats, checkpoint, token, destination)
        message = f"Publish {staged.checkpoint} of run {Path(run_dir).name}"
        send = _send_modelscope if destination == MODELSCOPE else _send_hub
        say(Msg("publish.creating", repo=repo_id, visibility="private" if private else "public"))
        url, commit_url = send(staged, folder, url_base, token, private, existing, message, say)
    published = Published(url, commit_url, staged.files)
    say(Msg("publish.published", url=published.url))
    return published


DESCRIPTION = "Uploaded by ZeroLoRA: the weights, their model card and the card's sample images."


def _send_hub(staged: Staged, folder: Path, url_base: str, token: str, private: bool,
              existing: bool, message: str, say: Callable[[Msg], None]
              ) -> tuple[str, str | None]:
    """``create_repo`` and ``upload_folder`` of ``huggingface_hub``: one commit (the Hub
    validates the card on it). Its client has no progress hook but a console bar, so the
    page says the size once."""
    from huggingface_hub import HfApi

    repo_id = staged.repo_id
    api = HfApi(endpoint=url_base, token=token, library_name="zerolora")
    with hub_errors(repo_id, url_base, token):
        url = api.create_repo(repo_id, private=private, exist_ok=existing, repo_type="model")
        say(Msg("publish.uploading", n=len(staged.files),
                size=size_text(sum(n for _, n in staged.files))))
        commit = api.upload_folder(repo_id=repo_id, folder_path=folder, repo_type="model",
                                   commit_message=message, commit_description=DESCRIPTION)
    return str(url), getattr(commit, "commit_url", None)


def _send_modelscope(staged: Staged, folder: Path, url_base: str, token: str, private: bool,
                     existing: bool, message: str, say: Callable[[Msg], None]
                     ) -> tuple[str, str | None]:
    """ModelScope's ``create_repo`` (``POST /api/v1/models``) and ``upload_folder`` (large
    files as LFS blobs, then commits in batches), without its resume cache (the staged
    folder is thrown away) and with its progress events said as bytes sent."""
    try:
        from modelscope.hub.api import HubApi
    except ImportError:
        raise PublishError(Msg("publish.ms_missing")) from None
    repo_id = staged.repo_id
    total = sum(n for _, n in staged.files)
    failed: list[str] = []

    def progress(event: dict) -> None:
        kind = event.get("event")
        if kind == "batch_failed" and event.get("error"):
            failed.append(str(event["error"]))
        elif kind in ("upload_progress", "batch_committed", "recovery_committed"):
            done = max(int(event.get("uploaded_bytes") or 0),
                       int(event.get("committed_bytes") or 0))
            say(Msg("publish.sent", done=size_text(done),
                    total=size_text(int(event.get("total_bytes") or total)),
                    percent=round(100 * done / max(1, total))))

    api = HubApi(endpoint=url_base, token=token, max_retries=MS_RETRIES)
    with modelscope_errors(repo_id, url_base, token, failed):
        api.create_repo(repo_id, repo_type="model", license=staged.license,
                        visibility="private" if private else "public", exist_ok=existing)
        say(Msg("publish.uploading", n=len(staged.files), size=size_text(total)))
        api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="model",
                          commit_message=message, commit_description=DESCRIPTION,
                          use_cache=False, disable_tqdm=True, progress_callback=progress)
    return repo_url(repo_id, MODELSCOPE, url_base), None


STATUS_RE = re.compile(r"\[(\d{3})\]")


@contextmanager
def modelscope_errors(repo_id: str, endpoint: str, token: str,
                      failed: list[str]) -> Iterator[None]:
    """Each way ModelScope or the network fails, as a ``PublishError`` that says why.
    ``upload_folder`` ends a failed upload with a summary; the batch's own error (``failed``,
    from its progress events) carries the status."""
    from modelscope_hub.errors import (AlreadyExistsError, APIError, AuthenticationError,
                                       HubError, NetworkError, NotExistError,
                                       PermissionDeniedError)

    def plain(text: str) -> str:
        text = " ".join(str(text).split("\n")[0].split())[:300]
        return text.replace(token, "***") if token else text

    def by_status(status: int | None, why: str) -> PublishError:
        owner = repo_id.split("/")[0]
        if status == 401:
            return PublishError(Msg("publish.ms_unauthorized"))
        if status == 403:
            return PublishError(Msg("publish.ms_forbidden", repo=repo_id, owner=owner))
        if status == 404:
            return PublishError(Msg("publish.ms_not_found", repo=repo_id))
        return PublishError(Msg("publish.ms_http_failed", status=status, why=plain(why)))

    try:
        yield
    except AuthenticationError:
        raise PublishError(Msg("publish.ms_unauthorized")) from None
    except PermissionDeniedError:
        raise PublishError(Msg("publish.ms_forbidden", repo=repo_id,
                               owner=repo_id.split("/")[0])) from None
    except AlreadyExistsError:
        raise PublishError(Msg("publish.ms_name_taken", repo=repo_id)) from None
    except NotExistError:
        raise PublishError(Msg("publish.ms_not_found", repo=repo_id)) from None
    except NetworkError as e:
        raise PublishError(Msg("publish.ms_network", endpoint=endpoint,
                               why=plain(getattr(e, "message", "") or str(e)))) from None
    except APIError as e:
        raise by_status(e.status_code, e.message) from None
    except (HubError, RuntimeError) as e:  # the upload's summary: the batch's error says why
        last = failed[-1] if failed else str(e)
        m = STATUS_RE.search(last)
        if m:
            raise by_status(int(m.group(1)), last) from None
        raise PublishError(Msg("publish.ms_upload_failed", why=plain(last))) from None
    except OSError as e:
        raise PublishError(Msg("publish.ms_network", endpoint=endpoint,
                               why=plain(str(e)))) from None
