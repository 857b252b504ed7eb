"""What an import does not understand is a message: each entry of ``not_understood`` reads
in Chinese (``Msg.text("zh")``, no English outside backticks, the command's own text kept
inside them) and in English exactly as the importer has always written it."""
from __future__ import annotations

import json
import re

import pytest

from backend.core.messages import Msg
from backend.planning.importer import import_commands
from tests.harness.chinese import assert_chinese

LAUNCH = ("accelerate launch {launch} examples/qwen_image/model_training/train.py --task sft "
          "--dataset_base_path d {flags}")
DS = {"zero_optimization": {"stage": 2, "round_robin_gradients": True, "reduce_bucket_size": "auto",
                            "offload_optimizer": {"device": "cpu", "ratio": 0.5},
                            "stage3_gather_16bit_weights_on_model_save": False},
      "optimizer": {"type": "AdamW"}, "bf16": {"enabled": True, "odd": 1},
      "train_micro_batch_size_per_gpu": 4}

# (command, files given with it, English entry, the command's own text it quotes)
CASES = [
    (LAUNCH.format(launch="", flags="--no_such_flag 3"), {},
     "command 1: --no_such_flag 3", "--no_such_flag 3"),
    (LAUNCH.format(launch="", flags="--lora_rank -5"), {},
     "lora_rank: input should be greater than or equal to 1 (got '-5'; allowed ≥ 1 and ≤ 1024) "
     "-- left at the default", "'-5'"),
    (LAUNCH.format(launch="--dynamo_backend inductor", flags=""), {},
     "command 1: accelerate launch --dynamo_backend inductor", "--dynamo_backend inductor"),
    (LAUNCH.format(launch="--bogus", flags=""), {},
     "command 1: accelerate launch options not understood: --bogus "
     "examples/qwen_image/model_training/train.py --task sft --dataset_base_path d", "--bogus"),
    ("python train.py --task sft --lora_rank", {},
     "command 1: could not read the trainer flags: --task sft --lora_rank",
     "--task sft --lora_rank"),
    ("WANDB_MODE=offline " + LAUNCH.format(launch="", flags=""), {},
     "command 1: environment WANDB_MODE=offline", "WANDB_MODE=offline"),
    (LAUNCH.format(launch="--deepspeed_config_file ds.json", flags=""),
     {"ds.json": json.dumps(DS)},
     "command 1: zero_optimization.round_robin_gradients: True in ds.json",
     "zero_optimization.round_robin_gradients: True"),
    (LAUNCH.format(launch="--deepspeed_config_file ds.json", flags=""),
     {"ds.json": json.dumps(DS)},
     "command 1: zero_optimization.offload_optimizer.ratio: 0.5 in ds.json",
     "zero_optimization.offload_optimizer.ratio: 0.5"),
    (LAUNCH.format(launch="--deepspeed_config_file ds.json", flags=""),
     {"ds.json": json.dumps(DS)},
     'command 1: optimizer: {"type": "AdamW"} in ds.json', 'optimizer: {"type": "AdamW"}'),
    (LAUNCH.format(launch="--deepspeed_config_file ds.json", flags=""),
     {"ds.json": json.dumps(DS)},
     "command 1: zero_optimization.reduce_bucket_size: 'auto' in ds.json (kept ZeroLoRA's "
     "number)", "zero_optimization.reduce_bucket_size: 'auto'"),
    (LAUNCH.format(launch="--deepspeed_config_file ds.json", flags=""),
     {"ds.json": json.dumps(DS)},
     "command 1: stage3_gather_16bit_weights_on_model_save false in ds.json (ZeroLoRA always "
     "gathers to save the LoRA)", "stage3_gather_16bit_weights_on_model_save"),
    (LAUNCH.format(launch="--deepspeed_config_file ds.json", flags=""),
     {"ds.json": json.dumps({**DS, "train_micro_batch_size_per_gpu": "four"})},
     "command 1: train_micro_batch_size_per_gpu: 'four' in ds.json",
     "train_micro_batch_size_per_gpu: 'four'"),
    (LAUNCH.format(launch="--deepspeed_config_file ds.json", flags=""), {"ds.json": "[1"},
     "command 1: DeepSpeed file ds.json not readable: ds.json: not valid JSON (Expecting ',' "
     "delimiter: line 1 column 3 (char 2))", "ds.json"),
    (LAUNCH.format(launch="--deepspeed_config_file ds.json", flags=""), {"ds.json": "[1]"},
     "command 1: DeepSpeed file ds.json not readable: not a JSON object", "ds.json"),
    (LAUNCH.format(launch="--config_file a.yaml", flags=""),
     {"a.yaml": "distributed_type: FSDP\n"},
     "command 1: distributed_type FSDP in a.yaml (ZeroLoRA runs plain, multi-GPU or "
     "DeepSpeed)", "FSDP"),
    (LAUNCH.format(launch="--config_file a.yaml", flags=""),
     {"a.yaml": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  foo: x\n"},
     "command 1: deepspeed_config.foo: 'x' in a.yaml", "deepspeed_config.foo: 'x'"),
    (LAUNCH.format(launch="--config_file a.yaml", flags=""),
     {"a.yaml": "distributed_type: NOPE\n"},
     "command 1: accelerate config a.yaml not readable: 'NOPE' is not a valid DistributedType",
     "a.yaml"),
]


def _entry(text: str, files: dict[str, str], english: str) -> Msg:
    result = import_commands(text, files=files)
    said = [str(n) for n in result.not_understood]
    assert english in said, said
    return result.not_understood[said.index(english)]


@pytest.mark.parametrize("text, files, english, own", CASES,
                         ids=[c[2].split(" in ")[0][:48] for c in CASES])
def test_each_entry_not_understood_reads_in_chinese(text, files, english, own):
    entry = _entry(text, files, english)
    assert isinstance(entry, Msg) and entry.text("en") == english
    zh = assert_chinese(entry)
    assert zh != english and re.search(r"[\u4e00-\u9fff]", zh), zh
    assert own in zh, (own, zh)
    if not entry.code.startswith("import.unreadable_") or entry.code == "import.unreadable_flags":
        # the command's own text stands in a code span, not as prose
        assert any(own in span for span in re.findall(r"`([^`]*)`", zh)), (own, zh)


def test_every_entry_of_a_messy_import_is_a_message_with_chinese():
    """One command with a bit of everything: no entry is left as plain English."""
    result = import_commands("WANDB_MODE=offline " + LAUNCH.format(
        launch="--dynamo_backend inductor --deepspeed_config_file ds.json",
        flags="--no_such_flag 3 --lora_rank -5"), files={"ds.json": json.dumps(DS)})
    assert len(result.not_understood) >= 9, result.not_understood
    for entry in result.not_understood:
        assert isinstance(entry, Msg), entry
        assert_chinese(entry)
    (env,) = [n for n in result.not_understood if "WANDB_MODE" in n]
    assert env.text("zh") == "命令 1：环境变量 `WANDB_MODE=offline`"
    (rank,) = [n for n in result.not_understood if n.startswith("lora_rank:")]
    assert rank.text("zh").startswith("`lora_rank`：") and rank.text("zh").endswith("——保持默认值")
