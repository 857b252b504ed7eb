"""Dataset folders for the Dataset tab: new folders from uploads, captions as a table.

A dataset folder holds images plus either ``metadata.csv`` (columns image,prompt) or one
same-named ``.txt`` caption per image -- the two layouts ``backend.data.dataset`` reads. Captions are
read and written here; checking them is ``backend.data.dataset.validate_dataset``.

Who may touch which folder (``webui.security``): every function here takes the signed-in
``user`` (None with sign-in off) and the ``workspace``. With sign-in on, uploads go under
``{workspace}/datasets/<user>/`` (``security.user_dataset_root``), where that user's runs
may read them; a non-admin reads captions and thumbnails only where their runs may read
(``security.check_dataset_paths``) and writes captions only under their own folder. An
upload is refused as a whole, leaving nothing on disk, when it is unsafe, larger than the
user's quota (``security.quota``) or when its metadata names a file outside the upload. A
refusal is a ``DatasetFolderError`` whose text names the field and what is allowed.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import zipfile
from pathlib import Path

from backend.config.errors import field_problem
from backend.core.messages import Msg
from backend.data.dataset import EDIT_IMAGE_KEY, IMAGE_EXTS, IMAGE_KEY, PROMPT_KEY

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")
from backend.core.media_types import VIDEO_EXTS  # noqa: E402

MEDIA_EXTS = IMAGE_EXTS + VIDEO_EXTS  # an upload is images, or clips of a video dataset
ALLOWED_UPLOADS = MEDIA_EXTS + (".txt", ".csv", ".json", ".jsonl")


class DatasetFolderError(ValueError):
    """A problem with an upload or a caption table, worded for people."""


def datasets_root(workspace: Path, user: str | None = None) -> Path:
    """Where ``user``'s uploads go: ``{workspace}/datasets/<user>/`` with sign-in on (admins
    too: one folder per user, so no upload name can land in another user's folder),
    ``{workspace}/datasets/`` with sign-in off."""
    from webui import security

    if user is None:
        if security.policy().auth_enabled:
            raise DatasetFolderError("user: sign in first (got no user; allowed a signed-in "
                                     "user)")
        return Path(workspace) / security.DATASETS_DIR
    try:
        return security.user_dataset_root(workspace, user)
    except security.AccessDenied as e:
        raise DatasetFolderError(str(e)) from None


def access_problems(base: str | None, metadata: str | None, user: str | None,
                    workspace: Path, *, write: bool = False, runner=None) -> list[str]:
    """What ``user`` may not read (``write``: write captions into) of a dataset folder and
    metadata file, as ``field: problem`` lines (``security.check_dataset_paths``)."""
    from webui import security

    return security.check_dataset_paths(base or "", metadata or None, user, workspace,
                                        write=write, runner=runner)


def _check_access(base, metadata, user, workspace, write=False, runner=None) -> None:
    problems = access_problems(base, metadata, user, workspace, write=write, runner=runner)
    if problems:
        raise DatasetFolderError("\n".join(problems))


def _uploads_gate(workspace: Path, user: str | None):
    """The write gate of uploads: inside ``datasets_root(workspace, user)`` only, every
    folder on the way opened without following links (``backend.core.writegate``)."""
    from backend.core import writegate

    root = datasets_root(workspace, user)
    if not root.is_symlink():
        root.mkdir(parents=True, exist_ok=True)
    return writegate.gate_of([root])


def new_dataset_dir(workspace: Path, name: str, user: str | None = None) -> Path:
    from backend.core import writegate

    name = (name or "").strip()
    if not NAME.match(name):
        raise DatasetFolderError(f"name: not a folder name (got {name!r}; allowed letters, "
                                 f"digits, _ . - up to 80 characters)")
    root = datasets_root(workspace, user)
    folder = root / name
    if root.is_symlink() or folder.is_symlink():
        raise DatasetFolderError(f"name: the dataset folder is a link (got {str(folder)!r}; "
                                 f"allowed a folder under {root})")
    # Uploads land where this user's own runs may read them (and nowhere else).
    _check_access(str(folder), None, user, workspace, write=True)
    try:
        with _uploads_gate(workspace, user).folder(folder, "name", create=True) as fd:
            taken = bool(os.listdir(fd))
    except writegate.WriteRefused as e:
        raise DatasetFolderError(f"name: the dataset folder is a link or not writable (got "
                                 f"{name!r}; allowed a new folder under {root})") from e
    if taken:
        raise DatasetFolderError(f"name: a dataset with this name already exists (got "
                                 f"{name!r}; allowed a new name)")
    return folder


def _extract_zip(src: Path, dest: Path, max_bytes: int | None = None) -> list[Path]:
    """Unpack a zip with the hosting layer's hardened ``safe_extract_zip`` (no absolute
    paths, no ``..``, no links, size and count limits -- ``max_bytes``: the user's quota
    left; images and captions only)."""
    from webui.security import MAX_ZIP_BYTES, UnsafeArchiveError, safe_extract_zip

    limit = MAX_ZIP_BYTES if max_bytes is None else max(0, min(max_bytes, MAX_ZIP_BYTES))
    try:
        return list(safe_extract_zip(src, dest, max_total_bytes=limit))
    except UnsafeArchiveError as e:
        raise DatasetFolderError(str(e)) from None


def add_uploads(workspace: Path, name: str, uploads: list[str], user: str | None = None
                ) -> tuple[Path, str | None, list[Msg]]:
    """Copy uploaded images/captions (and the contents of zips) into a new dataset folder
    under ``datasets_root(workspace, user)``.

    Returns (folder, metadata file or None, notes). A zip holding a single top folder is
    flattened into the dataset folder. Zips are unpacked in a private folder of the server
    first; every file then enters the dataset folder through the uploads' write gate (new
    files only, no link followed, a folder swapped for a link refused).
    """
    import tempfile

    from backend.core import writegate

    if not uploads:
        raise DatasetFolderError("files: nothing uploaded (allowed images, .txt captions, "
                                 "metadata.csv or a .zip of them)")
    from webui.security import quota

    refused = quota.dataset_problems(datasets_root(workspace, user), user)
    if refused:
        raise DatasetFolderError("\n".join(refused))
    limit = quota.upload_limit(datasets_root(workspace, user), user)
    folder = new_dataset_dir(workspace, name, user)
    gate = _uploads_gate(workspace, user)
    notes: list[Msg] = []
    try:
        for raw in uploads:
            src = Path(raw)
            if src.suffix.lower() == ".zip":
                with tempfile.TemporaryDirectory(prefix="zerolora-unpack-") as staging:
                    left = None if limit is None else limit - quota.folder_bytes(folder)
                    _extract_zip(src, Path(staging), left)
                    tops = [p for p in Path(staging).iterdir()]
                    root = tops[0] if len(tops) == 1 and tops[0].is_dir() else Path(staging)
                    for p in sorted(root.rglob("*")):
                        if p.is_file() and p.suffix.lower() in ALLOWED_UPLOADS:
                            gate.copy_file(p, folder / p.relative_to(root), "files",
                                           parents=True)
                        elif p.is_file():
                            notes.append(Msg("dataset.skipped_kind", name=p.name))
            elif src.suffix.lower() in ALLOWED_UPLOADS:
                if limit is not None and quota.folder_bytes(folder) + src.stat().st_size > limit:
                    raise DatasetFolderError(f"files: the upload is larger than your quota "
                                             f"allows (allowed up to {limit} bytes)")
                gate.copy_file(src, folder / _clean_name(src.name), "files")
            else:
                notes.append(Msg("dataset.skipped_ext", name=src.name,
                                 exts=list(ALLOWED_UPLOADS)))
    except zipfile.BadZipFile as e:
        shutil.rmtree(folder, ignore_errors=True)
        raise DatasetFolderError(f"zip: not a readable zip file ({e})") from e
    except writegate.WriteRefused as e:
        shutil.rmtree(folder, ignore_errors=True)
        raise DatasetFolderError(f"files: {str(e).split(': ', 1)[-1]}".replace(
            str(folder), name)) from None
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    meta = None
    for candidate in ("metadata.csv", "metadata.jsonl", "metadata.json"):
        if (folder / candidate).is_file():
            meta = str(folder / candidate)
            break
    images = [p for p in folder.rglob("*") if p.suffix.lower() in MEDIA_EXTS]
    problems = [] if images else [f"files: no images or videos among the uploads (allowed "
                                  f"{', '.join(MEDIA_EXTS)})"]
    # An upload is self-contained: its metadata names files of the upload only.
    problems += _outside_rows(folder, Path(meta)) if meta else []
    if problems:  # refused as a whole: nothing of it stays on disk
        shutil.rmtree(folder, ignore_errors=True)
        raise DatasetFolderError("\n".join(problems))
    if meta is None:
        for img in images:
            txt = img.with_suffix(".txt")
            if not os.path.lexists(txt):
                with gate.create(txt, "files"):
                    pass
                notes.append(Msg("dataset.no_caption", name=img.name, txt=txt.name))
    return folder, meta, notes


def _outside_rows(folder: Path, meta: Path) -> list[str]:
    """Rows of an uploaded metadata file that name a file outside the upload's folder (the
    first one, worded without saying whether that file exists)."""
    root = Path(os.path.realpath(folder))
    try:
        rows = _read_rows(meta)
    except (OSError, ValueError, DatasetFolderError, csv.Error) as e:
        return [f"{meta.name}: cannot read ({type(e).__name__}; allowed image,prompt rows)"]
    for i, row in enumerate(rows, 1):
        # The target and, in a pair dataset (edit models), the input images.
        values = [v for key in (IMAGE_KEY, EDIT_IMAGE_KEY)
                  for v in _as_list(row.get(key) if isinstance(row, dict) else None)]
        for value in values:
            if not isinstance(value, str) or not value:
                continue
            real = Path(os.path.realpath(root / os.path.expanduser(value)))
            if not (real == root or root in real.parents):
                return [f"{meta.name} row {i}: names a file outside this upload (got "
                        f"{value!r}; allowed paths of files in the upload, e.g. a.png)"]
    return []


def _as_list(value) -> list:
    if isinstance(value, str) and value.strip().startswith("["):  # a CSV cell's JSON list
        try:
            value = json.loads(value)
        except ValueError:
            pass
    return value if isinstance(value, list) else [value]


def _clean_name(name: str) -> str:
    base = os.path.basename(name.replace("\\", "/"))
    cleaned = re.sub(r"[^A-Za-z0-9_.() -]", "_", base).lstrip(".")
    return cleaned or "file"


# ---------------------------------------------------------------------- captions
def read_captions(base: str, metadata: str | None, *, user: str | None, workspace: Path,
                  runner=None) -> list[list[str]]:
    """[[image (relative to base), caption], ...] of a dataset folder, without the trigger.

    Refused (``DatasetFolderError``) for a folder ``user`` may not read."""
    _check_access(base, metadata, user, workspace, runner=runner)
    folder = Path(base or "").expanduser()
    if not base or not folder.is_dir():
        raise DatasetFolderError(f"dataset_base_path: folder not found (got {base!r})")
    if metadata:
        meta = Path(metadata).expanduser()
        if not meta.is_file():
            raise DatasetFolderError(f"dataset_metadata_path: file not found (got {metadata!r})")
        return [[str(r.get(IMAGE_KEY) or r.get("video") or ""), "" if r.get(PROMPT_KEY) is None
                 else str(r.get(PROMPT_KEY))] for r in _read_rows(meta)]
    rows = []
    for img in sorted(p for p in folder.iterdir() if p.suffix.lower() in MEDIA_EXTS):
        txt = img.with_suffix(".txt")
        caption = txt.read_text(encoding="utf-8", errors="replace").strip() if txt.is_file() \
            else ""
        rows.append([img.name, caption])
    return rows


def _read_rows(meta: Path) -> list[dict]:
    from backend.data.dataset import DatasetError, read_metadata_rows

    if meta.suffix.lower() not in (".csv", ".json", ".jsonl"):
        raise DatasetFolderError(field_problem("dataset_metadata_path", Msg(
            "validation.metadata_format", got=meta.name)))
    try:
        rows = read_metadata_rows(meta)
    except DatasetError as e:
        raise DatasetFolderError(field_problem("dataset_metadata_path", Msg(
            "validation.problems_joined", problems=list(e.problems)))) from None
    return [r for r in rows if isinstance(r, dict)]


def save_captions(base: str, metadata: str | None, rows: list[list], *, user: str | None,
                  workspace: Path) -> int:
    """Write the table back (metadata file, or one .txt per image); returns rows written.

    Only images already in the folder are touched; other columns of a metadata file are kept.
    Refused (``DatasetFolderError``, nothing written) outside ``user``'s own folders; every
    file is written through the user's write gate (``security.write_gate``), so a link
    planted at a caption's name or swapped in for a folder, before or during the save, is
    refused or replaced, never written through.
    """
    from backend.core import writegate
    from backend.data.captions import write_metadata_rows
    from webui import security

    _check_access(base, metadata, user, workspace, write=True)
    folder = Path(base or "").expanduser().resolve()
    if not base or not folder.is_dir():
        raise DatasetFolderError(f"dataset_base_path: folder not found (got {base!r})")
    table = [(str(r[0]).strip(), "" if r[1] is None else str(r[1]).strip())
             for r in rows if r and str(r[0]).strip()]
    problems = []
    for image, _ in table:
        p = (folder / image).resolve()
        if folder not in p.parents or not p.is_file():
            problems.append(f"{image}: not an image in {folder}")
    if problems:
        raise DatasetFolderError("; ".join(problems))
    gate = security.write_gate(user, workspace)
    try:
        if metadata:
            meta = Path(metadata).expanduser()
            old = _read_rows(meta) if meta.is_file() else []
            by_image = {str(r.get(IMAGE_KEY, "")): r for r in old}
            out = []
            for image, caption in table:
                row = dict(by_image.get(image, {IMAGE_KEY: image}))
                row[PROMPT_KEY] = caption
                out.append(row)
            write_metadata_rows(meta, out, gate)
        else:
            for image, caption in table:
                gate.write_text((folder / image).with_suffix(".txt"), caption + "\n",
                                "caption")
    except writegate.WriteRefused as e:
        raise DatasetFolderError(str(e)) from None
    return len(table)


def image_paths(base: str, rows: list[list], limit: int = 48, *, user: str | None,
                workspace: Path, runner=None) -> list[tuple[str, str]]:
    """(path, caption) of the first images of the table, for a preview gallery.

    Refused (``DatasetFolderError``) for a folder ``user`` may not read."""
    _check_access(base, None, user, workspace, runner=runner)
    folder = Path(base or "").expanduser().resolve()
    out = []
    for r in rows[:limit]:
        p = (folder / str(r[0])).resolve()
        if folder in p.parents and p.is_file():
            out.append((str(p), str(r[1])[:80]))
    return out
