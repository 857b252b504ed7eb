"""Publishing a run's LoRA (or a full fine-tune's checkpoint) from the page
(``webui/tabs/publish.py``) and the API (``/publish_run``) through ``backend.publish``,
under the hosting rules.

- The run is one the caller may have (the caller checks it: ``Ctx.run``, the API's
  ``checked_run``): its owner, or an admin.
- The caller picks the hub (``destination``: huggingface or modelscope); its address is the
  server's (``HF_ENDPOINT`` / ``MODELSCOPE_ENDPOINT`` of its environment, else the hub's
  own); a user never names another.
- A typed token lives in memory for this call only: it is handed to the hub's client, added
  to what ``security.redact`` hides, and never written or logged. An empty token means the
  server's own (``HF_TOKEN`` or huggingface_hub's login; ``MODELSCOPE_API_TOKEN``), for
  admins and the one local user (sign-in off) only: a hosted user publishes with their own.

Refusals are ``PublishError`` (one message) or ``ConfigError`` (the run's settings file
cannot be read: its problems).
"""
from __future__ import annotations

import re
from typing import Callable, Iterable

from backend.core.diskspace import size_text
from backend.core.messages import Msg
from backend.publish import hub
from backend.publish.hub import PublishError, Published, Staged
from webui import security

# A card's image links point into the repository; the page shows their names instead.
IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def token_of(token: str | None, user: str | None,
             destination: str = hub.DEFAULT_DESTINATION) -> str | None:
    """The token to publish with: the one typed (remembered for redaction, in memory), or
    None (the server's own) for an admin or the local user; else a refusal."""
    token = (token or "").strip()
    if token:
        security.remember_secret(token)
        return token
    if security.is_admin(user):
        return None
    if destination == hub.MODELSCOPE:
        raise PublishError(Msg("publish.ms_own_token"))
    raise PublishError(Msg("publish.own_token"))


def _formats(formats: Iterable[str] | str | None) -> list[str] | None:
    if formats is None or isinstance(formats, str) and not formats.strip():
        return None
    return [formats] if isinstance(formats, str) else [str(f) for f in formats]


def preview(run: dict, repo_id: str, formats: Iterable[str] | str | None = None,
            checkpoint: str | None = None, token: str | None = None,
            destination: str | None = None) -> Staged:
    """The card and the files ``publish`` would send; nothing is sent. A typed token is only
    looked for in the staged bytes."""
    token = (token or "").strip() or None
    if token:
        security.remember_secret(token)
    return hub.preview(run["run_dir"], repo_id, _formats(formats), checkpoint or None, token,
                       hub.check_destination(destination))


def publish(run: dict, user: str | None, repo_id: str, *, private: bool = False,
            formats: Iterable[str] | str | None = None, checkpoint: str | None = None,
            token: str | None = None, existing: bool = False,
            destination: str | None = None,
            say: Callable[[Msg], None] | None = None) -> Published:
    """Send the run's weights and their card to the chosen hub (see the module
    docstring)."""
    destination = hub.check_destination(destination)
    hub.check_repo_id(repo_id, destination)
    return hub.publish(run["run_dir"], repo_id, token=token_of(token, user, destination),
                       private=bool(private), formats=_formats(formats),
                       checkpoint=checkpoint or None, existing=bool(existing),
                       destination=destination, say=say)


def repo_url(repo_id: str, destination: str | None = None) -> str:
    """Where ``repo_id`` is (or would be) on the chosen hub, as the server points at it."""
    return hub.repo_url(repo_id, hub.check_destination(destination))


def files_of(staged: Staged | Published) -> list[dict]:
    """The files sent (or to send) as ``{file, bytes}`` (the API's shape for files)."""
    return [{"file": path, "bytes": size} for path, size in staged.files]


def summary(staged: Staged, destination: str | None = None) -> Msg:
    """What a preview says: nothing sent, what would go where."""
    return Msg("publish.previewed", n=len(staged.files),
               size=size_text(sum(n for _, n in staged.files)),
               checkpoint=staged.checkpoint, url=repo_url(staged.repo_id, destination))


def file_lines(staged: Staged) -> list[Msg]:
    return [Msg("publish.file_line", file=path, size=size_text(size))
            for path, size in staged.files]


def card_markdown(card: str) -> str:
    """The card as the page shows it: its metadata as a YAML block, its body as Markdown
    with each image (a file of the repository, not of this server) named instead."""
    m = re.match(r"^---\s*\n(.*?)\n---\s*\n?(.*)$", card, re.S)
    head, body = (m.group(1), m.group(2)) if m else ("", card)
    body = IMAGE_LINK.sub(lambda i: f"🖼 `{i.group(1)}`", body)
    return (f"```yaml\n{head}\n```\n\n" if head else "") + body
