"""Training: the rest of the schema form (basic first, advanced per group), the files a run
would be started with -- accelerate YAML, DeepSpeed JSON, commands -- updated as the form
changes, every problem next to its field and in a summary, the memory estimate, and the
import of a pasted reference command."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import gradio as gr

from backend.config.errors import ConfigError
from backend.core.messages import Msg
from backend.config.schema import RunConfig
from backend.config.validation import validate
from backend.jobs import slurm_runs
from backend.jobs.processes import gpu_memory_totals_gb
from backend.core.rundir import RunDir
from backend.training.tracking import ONLINE
from webui.context import Ctx
from webui.form import GROUP_ORDER, problems_markdown
from webui.i18n import T
from webui.messages import bilingual, bilingual_plain, said

OWN_TABS = ("model", "data")  # groups shown in the Model and Dataset tabs
RUN_PLACEHOLDER = str(RunDir.new("<workspace>", "<run_id>").run_dir)
# The preview's files, as the plan writes them into a run folder.
PREVIEW = RunDir(".")
GEN_ACCELERATE = PREVIEW.accelerate_yaml("train").name
GEN_ACCELERATE_STAGE1 = PREVIEW.accelerate_yaml("data_process").name
GEN_DEEPSPEED = PREVIEW.deepspeed_json("train").name
GEN_COMMANDS = PREVIEW.commands.name
GEN_RUN_YAML = PREVIEW.run_yaml.name
GEN_SBATCH = PREVIEW.sbatch.name  # executor slurm: the job's script


def create_ui(ctx: Ctx) -> None:
    c, form = ctx.c, ctx.form
    groups = [g for g in GROUP_ORDER if g not in OWN_TABS]
    # What another tab did to the form, said where the user lands (e.g. a run's settings).
    c["train_notice"] = gr.Markdown("", elem_id="train-notice")
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            for g in groups:
                if form_fields(g, "basic"):
                    with gr.Group(elem_id=f"basic-{g}"):
                        gr.Markdown(T(f"group.{g}"), elem_classes=["zl-group-title"])
                        form.render_group(g, with_advanced=False)
                        if g == "training":  # derived from the batch fields, never asked for
                            c["train_batch"] = gr.Markdown("", elem_id="train-batch")
            for g in groups:
                form.render_group(g, with_basic=False)
                if g == "run":
                    tracker_key_fields(ctx)
            form.render_rest()
        with gr.Column(scale=2, min_width=360):
            c["problems"] = gr.Markdown("", elem_id="problems", label=T("train.problems"))
            with gr.Row(equal_height=True):
                c["target_gpu"] = gr.Dropdown(
                    TARGET_GPUS, value="this", label=T("train.target_gpu"), elem_id="target-gpu",
                    info=T("train.target_gpu_info"))
                c["target_bus"] = gr.Dropdown(
                    BUSES, value=25.0, label=T("train.target_bus"), elem_id="target-bus",
                    info=T("train.target_bus_info"))
            c["estimate"] = gr.Markdown("", elem_id="estimate", visible=False,
                                        elem_classes=["zl-estimate"])
            c["method_changes"] = gr.State({})
            c["apply_method"] = gr.Button(T("train.apply_method"), visible=False,
                                          elem_id="apply-method", size="sm")
            gr.Markdown(T("train.generated"), elem_classes=["zl-group-title"])
            with gr.Tabs(elem_id="generated"):
                with gr.Tab("accelerate", id="gen-tab-accelerate",
                            elem_id="gen-tab-accelerate"):
                    c["gen_accelerate"] = gr.Code(language="yaml", elem_id="gen-accelerate",
                                                  label=GEN_ACCELERATE,
                                                  interactive=False, max_lines=30)
                with gr.Tab("DeepSpeed", id="gen-tab-deepspeed", elem_id="gen-tab-deepspeed"):
                    c["gen_deepspeed"] = gr.Code(language="json", elem_id="gen-deepspeed",
                                                 label=GEN_DEEPSPEED,
                                                 interactive=False, max_lines=30)
                with gr.Tab(GEN_SBATCH, id="gen-tab-sbatch", elem_id="gen-tab-sbatch",
                            visible=form.defaults.get("executor") == "slurm") as tab:
                    c["gen_tab_sbatch"] = tab
                    c["storage_probe"] = gr.Markdown("", elem_id="storage-probe")
                    c["gen_sbatch"] = gr.Code(language="shell", elem_id="gen-sbatch",
                                              label=GEN_SBATCH, interactive=False,
                                              max_lines=40)
                with gr.Tab(GEN_COMMANDS, id="gen-tab-commands", elem_id="gen-tab-commands"):
                    c["gen_commands"] = gr.Code(language="shell", elem_id="gen-commands",
                                                label=GEN_COMMANDS,
                                                interactive=False, max_lines=40)
                with gr.Tab(GEN_RUN_YAML, id="gen-tab-run-yaml", elem_id="gen-tab-run-yaml"):
                    c["gen_run_yaml"] = gr.Code(language="yaml", elem_id="gen-run-yaml",
                                                label=GEN_RUN_YAML,
                                                interactive=False, max_lines=40)
            with gr.Accordion(T("train.import"), open=False, elem_id="import-acc"):
                c["import_text"] = gr.Textbox(lines=6, placeholder=T("train.import_ph"),
                                              show_label=False, elem_id="import-text")
                c["import_files"] = gr.File(label=T("train.import_files"), file_count="multiple",
                                            file_types=[".yaml", ".yml", ".json"],
                                            elem_id="import-files", height=90)
                c["import_btn"] = gr.Button(T("train.import_btn"), elem_id="import-btn")
                c["import_notes"] = gr.Markdown("", elem_id="import-notes")


def tracker_key_fields(ctx: Ctx) -> None:
    """A key of the run's own for each online tracker, shown while that tracker is on. Not
    schema fields: a key lives in the server's memory for the run it starts (``services``),
    never in a file, the history or a log."""
    for t in ONLINE:
        ctx.c[t.key_field] = gr.Textbox(
            label=T(f"train.{t.key_field}"), info=T("train.tracker_key_info"),
            type="password", max_lines=1, elem_id=t.key_field.replace("_", "-"),
            visible=bool(ctx.form.defaults.get(t.option)))


def form_fields(group: str, level: str):
    from backend.config.meta import field_meta
    from webui.form import visible_fields
    return [n for n in visible_fields() if field_meta(n)["group"] == group
            and field_meta(n)["ui"] == level]


# ---------------------------------------------------------------------- preview
def preview_files(cfg: RunConfig, workspace: Path, runner=None) -> dict[str, str]:
    """The files ``plan_run`` writes for ``cfg`` (and, for a run this server sends to SLURM,
    its ``sbatch`` script), rendered in a throw-away folder, with that folder's path shown
    as a placeholder for the real run folder."""
    tmp = Path(tempfile.mkdtemp(prefix="zerolora-preview-"))
    try:
        slurm_runs.plan_as_run(runner, cfg, tmp, cuda=has_cuda(), run_id="<run_id>")
        out = {}
        for name in (GEN_ACCELERATE, GEN_DEEPSPEED, GEN_COMMANDS, GEN_RUN_YAML,
                     GEN_ACCELERATE_STAGE1, GEN_SBATCH):
            p = tmp / name
            if p.is_file():
                out[name] = p.read_text(encoding="utf-8").replace(str(tmp.resolve()),
                                                                  RUN_PLACEHOLDER)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_cuda: list[bool] = []


def probe_markdown(runner) -> str:
    """Where the SLURM shared-storage probe stands (``slurm_runs.probe_state``): pending,
    ok, or a warning when the nodes' file is not visible here; "" on a local server."""
    state = slurm_runs.probe_state(runner)
    if state is None:
        return ""
    mark = "⚠ " if state["state"] in ("missing", "refused") else ""
    return mark + bilingual(state["text"])


def has_cuda() -> bool:
    """Whether stages will run on CUDA here, without importing torch in the UI process
    (an NVIDIA driver tool is present)."""
    if not _cuda:
        _cuda.append(shutil.which("nvidia-smi") is not None)
    return _cuda[0]


def machine_memory() -> tuple[float | None, float | None, int]:
    """(GPU memory GB of the smallest GPU or None, host RAM GB, number of GPUs)."""
    import psutil

    host = psutil.virtual_memory().total / 1e9
    gpus = gpu_memory_totals_gb()
    return (min(gpus) if gpus else None), host, len(gpus)


_machine: list = []
_recommended: dict = {}
TARGET_GPUS = [("this machine", "this")] + [(f"{g} GB GPU", str(g)) for g in (
    8, 12, 16, 20, 24, 32, 40, 48, 80, 96, 141)]
BUSES = [("PCIe 3.0 x16 (12 GB/s)", 12.0), ("PCIe 4.0 x16 (25 GB/s)", 25.0),
         ("PCIe 5.0 x16 (50 GB/s)", 50.0)]


def gb_text(n_bytes: float) -> str:
    """A size for people: GB (10^9 bytes) rounded, "under 0.1 GB" for less."""
    gb = n_bytes / 1e9
    if gb < 0.1:
        return Msg("estimate.under_tenth")
    return f"{gb:.0f} GB" if gb >= 10 else f"{gb:.1f} GB"


def target_markdown(cfg: RunConfig, gpu_gb: float, bus_gbs: float) -> tuple[str, dict]:
    """The verdict for a GPU of ``gpu_gb`` GB (not this machine) and every single-GPU way
    to fit the run on it side by side; returns (text, the suggested method's field changes,
    empty when nothing needs changing or nothing fits)."""
    from backend.planning import estimator

    est = estimator.estimate_memory(cfg, device="cuda")
    ok, line = estimator.fits(est, gpu_gb)
    rows, best = estimator.compare_methods(cfg, gpu_gb * 1e9, bus_gbs * 1e9)
    head = " | ".join(bilingual_plain(h) for h in (
        Msg("header.method"), "GPU", Msg("header.host RAM"), Msg("header.bus per step"),
        Msg("header.fits")))
    lines = [bilingual(Msg("estimate.target_head", gpu=gpu_gb)), "",
             f"{'✓' if ok else '⚠'} " + bilingual(line), "",
             f"| {head} |", "|---|---|---|---|---|"]
    for r in rows:
        bus = (Msg("estimate.bus_cell", size=gb_text(r.bus_bytes_per_step),
                   seconds=r.transfer_bound_s)
               if r.bus_bytes_per_step else Msg("word.none"))
        mark = "**" if r.name == best else ""
        lines.append(f"| {mark}{bilingual_plain(r.label)}{mark} | "
                     f"{bilingual_plain(gb_text(r.gpu_bytes))} | "
                     f"{bilingual_plain(gb_text(r.host_bytes))} | {bilingual_plain(bus)} | "
                     f"{'✓' if r.fits else '✗'} |")
    changes: dict = {}
    if best is None:
        lines += ["", bilingual(Msg("estimate.no_method"))]
    else:
        row = next(r for r in rows if r.name == best)
        changes = {k: v for k, v in row.changes.items() if getattr(cfg, k, None) != v}
        lines += ["", bilingual(Msg("estimate.fastest", label=row.label, why=row.why))]
        lines += ["", bilingual(Msg("estimate.form_uses") if not changes else Msg(
            "estimate.changes", changes=[f"`{k}` → `{v}`" for k, v in changes.items()]))]
    return "\n".join(lines), changes


def estimate_markdown(cfg: RunConfig) -> str | None:
    """The estimator's verdict for this machine (None when there is no estimator)."""
    try:
        from backend.planning import estimator
    except ImportError:
        return None
    if not _machine:
        _machine.append(machine_memory())
    gpu_gb, host_gb, n_gpus = _machine[0]
    try:
        est = estimator.estimate_memory(cfg, device="cuda" if gpu_gb else "cpu")
        ok, line = estimator.fits(est, gpu_gb, host_gb)
        if gpu_gb not in _recommended:
            _recommended[gpu_gb] = estimator.recommend_preset(gpu_gb, max(1, n_gpus))
    except Exception as e:  # noqa: BLE001 - an estimate must never block the form
        return bilingual(Msg("estimate.unavailable", error=f"{type(e).__name__}: {e}"))
    where = (Msg("estimate.machine_gpus", n=n_gpus, gpu=gpu_gb, ram=host_gb) if gpu_gb
             else Msg("estimate.machine_cpu", ram=host_gb))
    # Each line in both languages (the page shows one); the figures as a list, not a code
    # block, so they are translated too.
    return "\n".join([bilingual(Msg("estimate.machine_head", where=where)), "",
                      f"{'✓' if ok else '⚠'} " + bilingual(line), "",
                      bilingual(Msg("estimate.recommended", preset=_recommended[gpu_gb])), ""]
                     + [f"- {bilingual(x)}" for x in est.summary_lines()])


def batch_markdown(cfg: RunConfig | None) -> str:
    """The line under the batch fields: DeepSpeed's ``train_batch_size`` as the plan derives
    it (``backend.planning.plan.ds_batch_sizes``, the generator's own numbers)."""
    if cfg is None:
        return ""
    from backend.planning.plan import ds_batch_sizes

    b = ds_batch_sizes(cfg)
    return bilingual(Msg("batch.images_per_step", total=b["train_batch_size"],
                         micro=b["train_micro_batch_size_per_gpu"],
                         accumulation=b["gradient_accumulation_steps"],
                         processes=cfg.num_processes))


def bind_events(ctx: Ctx) -> None:
    c, form = ctx.c, ctx.form
    for t in ONLINE:  # a tracker's key field while the tracker is on
        if t.option in form.components:
            form.components[t.option].change(
                lambda on: gr.update(visible=bool(on)), inputs=form.components[t.option],
                outputs=c[t.key_field], show_progress="hidden", api_visibility="private",
                queue=False)

    def estimate_outputs(cfg: RunConfig | None, data: dict) -> dict:
        """The estimate panel: this machine's verdict, or a chosen GPU's with the methods
        side by side and the suggestion one click applies."""
        hidden = {c["estimate"]: gr.Markdown(visible=False), c["method_changes"]: {},
                  c["apply_method"]: gr.Button(visible=False)}
        if cfg is None:
            return hidden
        target = data.get(c["target_gpu"]) or "this"
        if target == "this":
            est = estimate_markdown(cfg)
            return {**hidden, c["estimate"]: gr.Markdown(value=est or "", visible=bool(est))}
        try:
            text, changes = target_markdown(cfg, float(target),
                                            float(data.get(c["target_bus"]) or 25.0))
        except Exception as e:  # noqa: BLE001 - an estimate must never block the form
            text, changes = bilingual(Msg("estimate.unavailable",
                                          error=f"{type(e).__name__}: {e}")), {}
        return {c["estimate"]: gr.Markdown(value=text, visible=True),
                c["method_changes"]: changes, c["apply_method"]: gr.Button(visible=bool(changes))}

    def estimate_config(cfg: RunConfig | None, cfg_dict: dict | None) -> RunConfig | None:
        """The form's config for the estimate: without a dataset yet, the model and the
        resolution settings are enough."""
        if cfg is not None or not cfg_dict:
            return cfg
        try:
            return validate(cfg_dict, require_inputs=False)
        except ConfigError:
            return None

    def refresh(data: dict):
        cfg, cfg_dict, problems = form.check(data)
        out = form.error_updates(problems, data[form.errors_shown])
        out[c["problems"]] = problems_markdown(problems)
        out[c["preset_diff"]] = _diff(c, data, cfg_dict)
        out[c["train_batch"]] = batch_markdown(estimate_config(cfg, cfg_dict))
        if cfg is None:
            note = "# fix the problems in the form to see this file"
            out.update({c["gen_accelerate"]: note, c["gen_deepspeed"]: note,
                        c["gen_commands"]: note, c["gen_run_yaml"]: note,
                        c["gen_sbatch"]: note})
            out.update(estimate_outputs(estimate_config(cfg, cfg_dict), data))
            return out
        try:
            files = preview_files(cfg, ctx.workspace, ctx.runner)
        except (ConfigError, ValueError, OSError) as e:
            files = {}
            out[c["problems"]] = problems_markdown(said(e))
        out[c["gen_accelerate"]] = files.get(GEN_ACCELERATE) or files.get(
            GEN_ACCELERATE_STAGE1) or "# no accelerate stage in this run"
        out[c["gen_deepspeed"]] = files.get(GEN_DEEPSPEED) or (
            "// zero_stage is 0: the train stage runs without DeepSpeed")
        out[c["gen_commands"]] = files.get(GEN_COMMANDS, "")
        out[c["gen_run_yaml"]] = files.get(GEN_RUN_YAML, "")
        out[c["gen_sbatch"]] = files.get(GEN_SBATCH, "")
        out[c["gen_tab_sbatch"]] = gr.Tab(visible=GEN_SBATCH in files)
        out[c["storage_probe"]] = probe_markdown(ctx.runner)
        out.update(estimate_outputs(cfg, data))
        return out

    outputs = form.error_outputs + [c["problems"], c["preset_diff"],
                                    c["gen_accelerate"], c["gen_deepspeed"],
                                    c["gen_commands"], c["gen_run_yaml"], c["gen_sbatch"],
                                    c["gen_tab_sbatch"], c["storage_probe"], c["estimate"],
                                    c["method_changes"], c["apply_method"], c["train_batch"]]
    inputs = form.inputs | {c["loaded"], c["loaded_name"], c["target_gpu"], c["target_bus"],
                            form.errors_shown}
    # Page load, every edit and every fill share one listener, so a slow first refresh (it
    # loads the planner and the estimator) can never land after a newer one with stale
    # values; a fill (a preset, an import) counts once, not once per field.
    triggers = [c["demo"].load, c["target_gpu"].change, c["target_bus"].change] + form.edited
    gr.on(triggers, refresh, inputs=inputs,
          outputs=outputs, trigger_mode="always_last", show_progress="hidden",
          show_progress_on=[c["estimate"]], api_visibility="private")

    def import_command(data: dict, request: gr.Request):
        """The command's settings onto the form: only the fields it sets change, each listed
        old → new; every other field keeps its value."""
        from backend.planning.importer import import_commands
        from webui import security

        def shown(text: str) -> str:  # a non-admin sees no server path
            return security.hide_server_paths(text, ctx.owner(request), ctx.workspace,
                                              models_dir=ctx.models_dir, runner=ctx.runner)

        try:
            result = import_commands(data[c["import_text"]] or "",
                                     files=import_files(data[c["import_files"]]),
                                     gate=import_gate(ctx, request))
        except (ConfigError, ValueError) as e:
            return {c["import_notes"]: shown(import_error_markdown(e))}
        before, _ = form.to_config(data)
        changed = {k: v for k, v in result.given.items()
                   if k in form.components and before.get(k) != v}
        return {**form.to_updates(changed, data),
                c["import_notes"]: shown(import_notes_markdown(result, before, changed))}

    def apply_method(data: dict):
        """The suggested method's fields into the form (the refresh that follows shows it)."""
        return form.to_updates(data[c["method_changes"]] or {}, data) or {
            form.snapshot: gr.skip()}  # nothing to change (an empty dict would be one value)

    c["apply_method"].click(apply_method, inputs=form.inputs | {c["method_changes"]},
                            outputs=form.fill_outputs, show_progress_on=[c["apply_method"]],
                            api_visibility="private")

    c["import_btn"].click(import_command,
                          inputs=form.inputs | {c["import_text"], c["import_files"]},
                          outputs=form.fill_outputs + [c["import_notes"]],
                          show_progress_on=[c["import_notes"]],
                          api_visibility="private")


def import_files(paths) -> dict[str, str]:
    """Launch files uploaded with a command: {file name: contents}."""
    out = {}
    for p in paths or []:
        p = Path(getattr(p, "name", p))
        out[p.name] = p.read_text(encoding="utf-8", errors="replace")
    return out


def import_gate(ctx: Ctx, request: gr.Request | None):
    """The read gate of the user importing: files a command names are read inside that
    user's folders only (sign-in off and admins: anywhere)."""
    from backend.core import readgate
    from webui import security

    cfg = validate({}, require_inputs=False)
    cfg = security.with_file_policy(cfg, ctx.owner(request), ctx.workspace,
                                    models_dir=ctx.models_dir, runner=ctx.runner)
    return readgate.gate_of(cfg.read_roots)


def import_notes_markdown(result, before: dict, changed: dict) -> str:
    """What an import did, in both languages where the text has Chinese: every field it
    changed (old → new), what it did not understand, its notes."""
    def shown(v) -> str:
        return "(empty)" if v is None or v == "" else str(v)

    if changed:
        lines = [bilingual(Msg("import.changed", n=len(changed))), ""]
        lines += [f"- `{k}`: `{shown(before.get(k))}` → `{shown(v)}`"
                  for k, v in changed.items()]
    else:
        lines = [bilingual(Msg("import.unchanged"))]
    if result.not_understood:
        lines += ["", bilingual(Msg("import.not_understood"))] + \
            [f"- {bilingual(n)}" if isinstance(n, Msg) else f"- `{n}`"
             for n in result.not_understood]
    if result.notes:
        lines += ["", bilingual(Msg("import.notes"))] + [f"- {bilingual(n)}" for n in result.notes]
    return "\n".join(lines)


def import_error_markdown(e: Exception) -> str:
    """Why an import failed, each line in both languages where it is a message: a config
    error's head, then its problems; a command text's error (``CommandError``) as it is."""
    if isinstance(e, ConfigError):
        head, *lines = str(e).split("\n")
        shown = [bilingual(head)] + [bilingual(p) if line == f"  {p}" else bilingual(line.strip())
                                     for p, line in zip(e.problems, lines)]
    else:
        shown = [bilingual(e.args[0] if e.args and isinstance(e.args[0], Msg) else str(e))]
    return "✗ " + "  \n".join(shown)


def _diff(c: dict, data: dict, cfg_dict: dict) -> str:
    from webui.tabs.model import diff_markdown
    return diff_markdown(data.get(c["loaded"]), cfg_dict, data.get(c["loaded_name"]))
