"""Messages of the data area (a dataset's files, rows and captions, a clip's frames, the
stage-1 cache): each code in English and Chinese (see backend.core.messages).

What the dataset check finds per file (``data.record_*``: where, then each problem),
the rows of a metadata file, what reading an image or a clip changed (warnings), a
clip's frames, an edit dataset's input images, and a cache that stage 2 cannot use. A
library's own error line (PIL, PyAV, JSON) stays plain text, quoted in Chinese
(``{why:q}``); file names, column names and options stand in code spans in Chinese."""

EN: dict[str, str] = {
    # ---------------------------------------------------------------- where, and nouns
    "data.where_row": "{file} row {row}",
    "data.noun.image": "image",
    "data.noun.video": "video",
    "data.noun.input_image": "input image",
    "data.noun.first_frame": "first-frame latents",
    "data.noun.reference": "reference-video latents",
    "data.none": "none",
    "data.noun.sample": "sample",
    # ---------------------------------------------------------------- batches and buckets
    "data.nothing_to_train": "validation_samples: leaves nothing to train on (got {n} with "
                             "{count} {what:@data.noun}s; allowed 0..{most})",
    "data.no_size_in_manifest": "batch_size: the cache manifest gives no size for {names} "
                                "(run stage 1 again; allowed batch_size 1 with this cache)",
    "data.no_empty_prompt": "caption_dropout: the cache has no empty-caption embedding "
                            "(missing {path}; allowed 0, or run stage 1 again with "
                            "caption_dropout > 0)",
    "data.no_full_batch": "batch_size: no bucket holds a full batch (got batch_size "
                          "{batch_size} with bucket_remainder drop and buckets of {sizes} "
                          "images; allowed a smaller batch_size, or bucket_remainder pad)",
    "data.bucket_shapes": "batch_size: samples of one bucket differ in {key} {shapes} "
                          "(allowed: batch_size 1)",
    "data.no_pad_mask": "batch_size: {key} lengths differ between samples and the family "
                        "gives no {key}_mask to pad them (allowed: batch_size 1)",
    "data.record_errors": "{where}: {errs:join=; }",
    "data.record_warnings": "{where} ({name}): {warns:join=; }",
    # ---------------------------------------------------------------- the dataset's rows
    "data.base_not_found": "dataset_base_path: folder not found (got {got!r})",
    "data.meta_not_found": "dataset_metadata_path: file not found (got {got!r})",
    "data.meta_unreadable": "{meta}: cannot read ({why:q})",
    "data.meta_format": "{meta}: unknown metadata format (allowed .csv, .json, .jsonl)",
    "data.json_not_list": "{meta}: expected a JSON list of objects with image and prompt "
                          "(got {got})",
    "data.jsonl_bad": "{meta} line {line}: not valid JSON ({why:q})",
    "data.missing_column": "{meta}: missing column {key!r} (columns: {columns}; allowed "
                           "image,prompt)",
    "data.row_not_object": "{where}: expected an object with {noun:@data.noun} and prompt",
    "data.row_missing": "{where}: missing {keys:join= and }",
    "data.row_missing_video": "{where}: missing {keys:join= and } (columns: {columns}; "
                              "allowed video,prompt)",
    "data.one_path": "{where}: {noun:@data.noun} must be one path (got {n})",
    "data.no_files": "dataset_base_path: no {noun:@data.noun}s ({exts}) in {base} and no "
                     "dataset_metadata_path",
    "data.no_caption_file": "{name}: caption file {txt} not found",
    "data.no_rows": "dataset_metadata_path: no rows in {meta}",
    # ---------------------------------------------------------------- one file
    "data.empty_caption": "empty caption",
    "data.is_folder": "{what:@data.noun} is a folder, not an image file (got {name!r})",
    "data.not_found": "{what:@data.noun} not found (got {name!r})",
    "data.too_small": "image too small ({w}x{h}; at least {m}x{m})",
    "data.exif_applied": "EXIF orientation {orientation} applied",
    "data.scaled_16bit": "16-bit image scaled to 8 bits",
    "data.composited": "transparent pixels composited on white",
    "data.upscaled": "upscaled {scale:.2g}x ({w}x{h} is smaller than the training size "
                     "{tw}x{th}; set height and width to at most the image's size, or use a "
                     "larger image)",
    # ---------------------------------------------------------------- clips
    "data.need_av": "video datasets need the av package (pip install av)",
    "data.video_not_found": "video not found (got {name!r})",
    "data.no_frames_folder": "no frames ({exts}) in folder {name}",
    "data.too_short_frames": "too short: {n} frames, {needed} needed for num_frames {num} "
                             "(frame_stride {stride})",
    "data.too_short_video": "too short: {n} frames at {fps:g} fps, {needed} needed for "
                            "num_frames {num} (video_fps {video_fps:g})",
    "data.too_short_video_stride": "too short: {n} frames at {fps:g} fps, {needed} needed "
                                   "for num_frames {num} (frame_stride {stride})",
    "data.too_short_bucket_frames": "too short: {n} frames, {needed} needed for the "
                                    "smallest of frame_buckets {buckets} (frame_stride "
                                    "{stride})",
    "data.too_short_bucket_video": "too short: {n} frames at {fps:g} fps, {needed} needed "
                                   "for the smallest of frame_buckets {buckets} (video_fps "
                                   "{video_fps:g})",
    "data.too_short_bucket_video_stride": "too short: {n} frames at {fps:g} fps, {needed} "
                                          "needed for the smallest of frame_buckets "
                                          "{buckets} (frame_stride {stride})",
    "data.too_short_window": "too short for window {index} of frame_extraction {mode}: {n} "
                             "frames, {needed} needed (the window starts at frame {start})",
    "data.clip_windows": "{n} windows of {frames} frames (frame_extraction {mode}; starting "
                         "at frames {starts})",
    "data.windows_total": "{clips} clips → {windows} windows, each a sample "
                          "(frame_extraction {mode})",
    "data.frame_size": "frame {name} is {w}x{h}, the clip's first frame {first} is "
                       "{w0}x{h0} (allowed frames of one size in a frames folder)",
    "data.cannot_decode": "cannot decode video {name}: {why:q}",
    "data.no_frames_video": "no frames in video {name}",
    "data.not_a_clip": "not a video, image or frames folder (got {name!r}; allowed {exts} or "
                       "a folder of frames)",
    "data.frames_too_small": "frames too small ({w}x{h}; at least {m}x{m})",
    "data.cannot_read_clip": "cannot read {name}: {why:q}",
    # ---------------------------------------------------------------- edit datasets
    "data.takes_no_inputs": "extra_inputs: {model} takes no input images (got {got!r}; "
                            "allowed '' for a text-to-image model, or an edit model's "
                            "sources)",
    "data.needs_inputs": "extra_inputs: {model} trains on input images (got ''; allowed "
                         "edit_image, with an edit_image column in the metadata)",
    "data.edit_needs_meta": "dataset_metadata_path: an edit dataset needs a metadata file "
                            "with image, edit_image and prompt (got none; allowed .csv, "
                            ".json, .jsonl)",
    "data.no_input_image": "{where}: edit_image: no input image (got {got}; allowed one path "
                           "or a list of 1 to {takes})",
    "data.missing": "missing",
    "data.too_many_inputs": "{where}: edit_image: {n} input images, more than {model} takes "
                            "(got {n}; allowed 1 to {takes})",
    "data.cannot_read_input": "cannot read input image {name}: {why:q}",
    # ---------------------------------------------------------------- a clip's sound
    "data.takes_no_sound": "extra_inputs: {model} makes no sound (got {got!r}; allowed '' "
                           "or the inputs it takes)",
    "data.sound_needs_split": "task: one-shot training reads no sound (got {got!r}; allowed "
                              "sft:data_process then sft:train with extra_inputs "
                              "input_audio)",
    "data.sound_not_found": "{where}: input_audio: {name} not found",
    "data.cannot_read_sound": "{where}: cannot read the sound of {name}: {why:q}",
    "data.no_sound": "{where}: {name} has no audio stream (got none; allowed a clip with "
                     "sound, an input_audio file, or audio_missing silence)",
    "data.silence": "{where}: {name} has no audio stream; it trains on silence "
                    "(audio_missing silence)",
    "data.sound_resampled": "{where}: the sound of {name} is {rate} Hz; resampled to the "
                            "model's {to} Hz",
    "data.cache_without_sound": "dataset_base_path: a cached sample has no sound (got a "
                                "video-only cache; allowed a cache written by "
                                "sft:data_process with extra_inputs input_audio)",
    "data.vocoder_class": "vocoder: not a vocoder the model loads (got {got}; allowed "
                          "{allowed})",
    "data.vocoder_channels": "vocoder: in_channels is not the audio VAE's channels x mel bins "
                             "(got {got}; allowed {channels} x {bins})",
    "data.vocoder_hop": "vocoder: the sound of a mel frame is not one hop of the audio VAE "
                        "(got {per_frame} samples at {rate} Hz; allowed {hop} samples at "
                        "{vae_rate} Hz)",
    "data.vocoder_extension": "vocoder: the bandwidth extension's sound of a mel frame is not "
                              "one hop of its mel (got {per_frame} samples at {out_rate} Hz; "
                              "allowed {hop} samples at {rate} Hz, output_sampling_rate a "
                              "multiple of input_sampling_rate)",
    # ---------------------------------------------------------------- IC-LoRA references
    "data.takes_no_reference": "extra_inputs: {model} takes no reference video (got {got!r}; "
                               "allowed '' or the inputs it takes)",
    "data.no_reference_video": "{where}: in_context_videos: no reference video (got none; "
                               "allowed a video, frames folder or image path, or a list of "
                               "them)",
    "data.reference_not_found": "{where}: in_context_videos: {name} not found",
    "data.no_sample_condition": "sample_images: the model renders from an image or a "
                                "reference video (got none for this prompt; allowed one per "
                                "prompt)",
    "data.sample_images_missing":
        "sample_images: the model renders from input images; line(s) {lines} give none "
        "(allowed 1 to {takes} images per prompt, separated by |, one line per sample prompt; "
        "or no sample_images at all to take them from the dataset's rows)",
    "data.sample_images_over": "sample_images: line(s) {lines} give more images than the model "
                               "takes (allowed {allowed})",
    "data.sample_images_at_most": "at most {n}",
    "data.sample_images_none": "none for a text-to-image model",
    "data.sample_images_too_many": "sample_images: more lines than sample_prompts (got {n} for "
                                   "{prompts} prompts; allowed one line per prompt)",
    "data.sample_image_not_found": "sample_images: line {line}: image not found (got {got!r}; "
                                   "allowed an image file)",
    "data.sample_first_frame_missing":
        "sample_images: an image-to-video model renders from a first frame (got none for this "
        "prompt; allowed one image per prompt)",
    "data.sample_edit_images_missing":
        "sample_images: an edit model renders from input images (got none for this prompt; "
        "allowed one to three images per prompt)",
    "data.cache_without_first_frame":
        "dataset_base_path: a cached sample has no first-frame inputs (got a text-to-video "
        "cache; allowed a cache written by sft:data_process for an image-to-video model, "
        "extra_inputs input_image)",
    "data.sample_videos_too_many": "sample_videos: more lines than sample_prompts (got {n} "
                                   "for {prompts} prompts; allowed one line per prompt)",
    "data.sample_video_not_found": "sample_videos: line {line}: reference clip not found (got "
                                   "{got!r}; allowed a video file, frames folder or image)",
    "data.sample_video_unusable": "sample_videos: line {line}: {name} cannot condition a "
                                  "sample of sample_num_frames {frames}: {why}",
    "data.row_reference_unusable": "sample_videos: prompt {line} takes the reference video of "
                                   "{where}, {name}, which cannot condition a sample of "
                                   "sample_num_frames {frames}: {why} (allowed a longer clip "
                                   "there, or sample_videos naming one)",
    "data.no_sample_reference": "sample_videos: the model renders from a reference video; "
                                "prompt(s) {lines} have none and the dataset's rows give none "
                                "(allowed one reference clip per prompt, one line per sample "
                                "prompt)",
    "data.takes_no_sample_videos": "sample_videos: {model} takes no reference video (got {n} "
                                   "line(s); allowed none)",
    "data.sample_images_with_reference": "sample_images: {model} conditions samples on "
                                         "reference videos (got {n} line(s); allowed none, "
                                         "with each prompt's reference clip in "
                                         "sample_videos)",
    "data.sample_reference_caption": "prompt {line}: the reference video of {where} "
                                     "({name}), whose caption is the prompt",
    "data.sample_reference_first_row": "prompt {line}: the reference video of {where} "
                                       "({name}), the first row (no row's caption is the "
                                       "prompt)",
    "data.image_with_reference": "extra_inputs: input_image and in_context_videos together "
                                 "(got {got!r}; allowed one of them, with input_audio or "
                                 "without)",
    "data.bad_downsample_factor": "{where}: in_context_downsample_factor: not a whole number "
                                  "that divides the clip's size into multiples of {m} (got "
                                  "{got!r}; allowed e.g. 1 or 2)",
    "data.cache_without_condition": "dataset_base_path: a cached sample has no "
                                    "{what:@data.noun} (got a cache without them; allowed a "
                                    "cache written by "
                                    "sft:data_process with extra_inputs {inputs})",
    # ---------------------------------------------------------------- the stage-1 cache
    "data.cache_bad_sample": "cache {manifest}: a sample that is not a file of the cache "
                             "folder (got {got!r}; allowed a name like <key>.safetensors)",
    "data.cache_bad_json": "cache {manifest}: not valid JSON ({why:q}); run --task "
                           "sft:data_process again",
    "data.cache_not_mapping": "cache {manifest}: not a mapping (got {got})",
    "data.cache_not_found": "dataset_base_path: cache folder not found (got {got!r}); run "
                            "--task sft:data_process with --output_path {folder} first",
    "data.cache_empty": "dataset_base_path: no cached samples in {folder}; run --task "
                        "sft:data_process with --output_path {folder} first",
    "data.cache_incomplete": "cache {folder} is incomplete, missing: {names}; run --task "
                             "sft:data_process again",
    # ---------------------------------------------------------------- captioning
    "data.caption_no_folder": "dataset_base_path: folder not found or not readable (got "
                              "{got!r}; allowed an existing dataset folder)",
    "data.caption_no_meta": "dataset_metadata_path: caption_target metadata writes the prompt "
                            "column of a metadata file (got {got!r}; allowed an existing "
                            ".csv, .json or .jsonl file, or caption_target txt)",
    "data.caption_nothing_rows": "dataset_base_path: no images to caption in rows of {meta} "
                                 "(got {got!r}; allowed a folder holding {exts} files)",
    "data.caption_nothing_folder": "dataset_base_path: no images to caption in the folder "
                                   "(got {got!r}; allowed a folder holding {exts} files)",
    "data.base_refused": "dataset_base_path: {why}",
    "data.caption_not_image": "dataset_base_path: {name} does not open as an image ({why:q}) "
                              "(got {name!r}; allowed {exts} image files)",
}

ZH: dict[str, str] = {
    "data.where_row": "{file} 第 {row} 行",
    "data.noun.image": "图像",
    "data.noun.video": "视频",
    "data.noun.input_image": "输入图像",
    "data.noun.first_frame": "首帧潜变量",
    "data.noun.reference": "参考视频潜变量",
    "data.none": "无",
    "data.noun.sample": "样本",
    "data.nothing_to_train": "`validation_samples`：没有留下可训练的数据（当前：{n}，共 "
                             "{count} 个{what:@data.noun}；可用：0..{most}）",
    "data.no_size_in_manifest": "`batch_size`：缓存清单没有给出 {names} 的尺寸（请重新运行"
                                "第 1 阶段；此缓存只能用 `batch_size` 1）",
    "data.no_empty_prompt": "`caption_dropout`：缓存中没有空描述的嵌入（缺少 {path}；可用：0，"
                            "或以 `caption_dropout` > 0 重新运行第 1 阶段）",
    "data.no_full_batch": "`batch_size`：没有分桶能装满一个批次（当前：`batch_size` "
                          "{batch_size}，`bucket_remainder` 为 `drop`，各分桶图像数 {sizes}；"
                          "可用：更小的 `batch_size`，或 `bucket_remainder` 设为 `pad`）",
    "data.bucket_shapes": "`batch_size`：同一分桶的样本在 {key} 上形状不同 {shapes}"
                          "（可用：`batch_size` 1）",
    "data.no_pad_mask": "`batch_size`：样本的 {key} 长度不同，而该模型系列没有用于填充的 "
                        "`{key}_mask`（可用：`batch_size` 1）",
    "data.record_errors": "{where}：{errs:join=；}",
    "data.record_warnings": "{where}（{name}）：{warns:join=；}",
    "data.base_not_found": "`dataset_base_path`：找不到文件夹（当前：{got!r}）",
    "data.meta_not_found": "`dataset_metadata_path`：找不到文件（当前：{got!r}）",
    "data.meta_unreadable": "{meta}：无法读取（{why:q}）",
    "data.meta_format": "{meta}：未知的元数据格式（可用：.csv、.json、.jsonl）",
    "data.json_not_list": "{meta}：应为含 `image` 和 `prompt` 的对象组成的 `JSON` 列表"
                          "（当前：`{got}`）",
    "data.jsonl_bad": "{meta} 第 {line} 行：不是有效的 `JSON`（{why:q}）",
    "data.missing_column": "{meta}：缺少列 {key!r}（现有列：`{columns}`；可用：`image,prompt`）",
    "data.row_not_object": "{where}：应为含{noun:@data.noun}和 `prompt` 的对象",
    "data.row_missing": "{where}：缺少 `{keys:join=`、`}`",
    "data.row_missing_video": "{where}：缺少 {keys:join=、}（现有列：`{columns}`；"
                              "可用：`video,prompt`）",
    "data.one_path": "{where}：{noun:@data.noun}只能是一个路径（当前：{n} 个）",
    "data.no_files": "`dataset_base_path`：{base} 中没有{noun:@data.noun}文件（{exts}），"
                     "也没有 `dataset_metadata_path`",
    "data.no_caption_file": "{name}：找不到描述文件 {txt}",
    "data.no_rows": "`dataset_metadata_path`：{meta} 中没有数据行",
    "data.empty_caption": "描述为空",
    "data.is_folder": "{what:@data.noun}是文件夹，不是图像文件（当前：{name!r}）",
    "data.not_found": "找不到{what:@data.noun}（当前：{name!r}）",
    "data.too_small": "图像太小（{w}x{h}；至少 {m}x{m}）",
    "data.exif_applied": "已按 `EXIF` 方向 {orientation} 旋转",
    "data.scaled_16bit": "16 位图像已缩放到 8 位",
    "data.composited": "透明像素已合成到白色背景上",
    "data.upscaled": "已放大 {scale:.2g} 倍（{w}x{h} 小于训练尺寸 {tw}x{th}；请把 `height` "
                     "和 `width` 设为不超过图像尺寸，或换用更大的图像）",
    "data.need_av": "视频数据集需要 `av` 包（`pip install av`）",
    "data.video_not_found": "找不到视频（当前：{name!r}）",
    "data.no_frames_folder": "文件夹 {name} 中没有帧（{exts}）",
    "data.too_short_frames": "太短：{n} 帧，`num_frames` {num} 需要 {needed} 帧"
                             "（`frame_stride` {stride}）",
    "data.too_short_video": "太短：{n} 帧（{fps:g} `fps`），`num_frames` {num} 需要 {needed} "
                            "帧（`video_fps` {video_fps:g}）",
    "data.too_short_video_stride": "太短：{n} 帧（{fps:g} `fps`），`num_frames` {num} 需要 "
                                   "{needed} 帧（`frame_stride` {stride}）",
    "data.too_short_bucket_frames": "太短：{n} 帧，`frame_buckets` {buckets} 中最小的帧数"
                                    "需要 {needed} 帧（`frame_stride` {stride}）",
    "data.too_short_bucket_video": "太短：{n} 帧（{fps:g} `fps`），`frame_buckets` {buckets} "
                                   "中最小的帧数需要 {needed} 帧（`video_fps` {video_fps:g}）",
    "data.too_short_bucket_video_stride": "太短：{n} 帧（{fps:g} `fps`），`frame_buckets` "
                                          "{buckets} 中最小的帧数需要 {needed} 帧"
                                          "（`frame_stride` {stride}）",
    "data.too_short_window": "太短：`frame_extraction` `{mode}` 的第 {index} 个窗口需要 "
                             "{needed} 帧，只有 {n} 帧（窗口从第 {start} 帧开始）",
    "data.clip_windows": "{n} 个窗口，每个 {frames} 帧（`frame_extraction` `{mode}`；"
                         "起始帧 {starts}）",
    "data.windows_total": "{clips} 个片段 → {windows} 个窗口，每个窗口是一个样本"
                          "（`frame_extraction` `{mode}`）",
    "data.frame_size": "帧 {name} 为 {w}x{h}，片段首帧 {first} 为 {w0}x{h0}"
                       "（帧文件夹中的帧须尺寸一致）",
    "data.cannot_decode": "无法解码视频 {name}（{why:q}）",
    "data.no_frames_video": "视频 {name} 中没有帧",
    "data.not_a_clip": "不是视频、图像或帧文件夹（当前：{name!r}；可用：{exts} 或帧文件夹）",
    "data.frames_too_small": "帧太小（{w}x{h}；至少 {m}x{m}）",
    "data.cannot_read_clip": "无法读取 {name}（{why:q}）",
    "data.takes_no_inputs": "`extra_inputs`：{model} 不接受输入图像（当前：{got!r}；"
                            "可用：文生图模型留空，或编辑模型的输入）",
    "data.needs_inputs": "`extra_inputs`：{model} 需要输入图像训练（当前为空；可用："
                         "`edit_image`，并在元数据中提供 `edit_image` 列）",
    "data.edit_needs_meta": "`dataset_metadata_path`：编辑数据集需要含 `image`、`edit_image` "
                            "和 `prompt` 的元数据文件（当前：无；可用：.csv、.json、.jsonl）",
    "data.no_input_image": "{where}：`edit_image`：没有输入图像（当前：{got}；可用：一个路径，"
                           "或 1 到 {takes} 个路径的列表）",
    "data.missing": "缺失",
    "data.too_many_inputs": "{where}：`edit_image`：{n} 张输入图像，超过 {model} 可接受的数量"
                            "（当前：{n}；可用：1 到 {takes}）",
    "data.cannot_read_input": "无法读取输入图像 {name}（{why:q}）",
    "data.takes_no_sound": "`extra_inputs`：{model} 不生成声音（当前：{got!r}；可用：留空，"
                           "或它接受的输入）",
    "data.sound_needs_split": "`task`：一次性训练不读取声音（当前：{got!r}；可用：先 "
                              "`sft:data_process` 再 `sft:train`，并设置 "
                              "`extra_inputs input_audio`）",
    "data.sound_not_found": "{where}：`input_audio`：找不到 {name}",
    "data.cannot_read_sound": "{where}：无法读取 {name} 的声音（{why:q}）",
    "data.no_sound": "{where}：{name} 没有音频流（当前：无；可用：带声音的视频、"
                     "`input_audio` 文件，或设置 `audio_missing: silence`）",
    "data.silence": "{where}：{name} 没有音频流，将以静音训练（`audio_missing: silence`）",
    "data.sound_resampled": "{where}：{name} 的声音采样率为 {rate} 赫兹，已重采样为模型的 "
                            "{to} 赫兹",
    "data.cache_without_sound": "`dataset_base_path`：有缓存样本没有声音（当前：仅视频的缓存；"
                                "可用：用 `extra_inputs input_audio` 运行 "
                                "`sft:data_process` 写入的缓存）",
    "data.vocoder_class": "`vocoder`：不是该模型可加载的声码器（当前：`{got}`；可用：{allowed}）",
    "data.vocoder_channels": "`vocoder`：`in_channels` 不等于音频 `VAE` 的声道数乘梅尔频带数"
                             "（当前：{got}；可用：{channels} × {bins}）",
    "data.vocoder_hop": "`vocoder`：一个梅尔帧的声音不是音频 `VAE` 的一个跳长（当前："
                        "{per_frame} 个采样，{rate} 赫兹；可用：{hop} 个采样，{vae_rate} "
                        "赫兹）",
    "data.vocoder_extension": "`vocoder`：带宽扩展中一个梅尔帧的声音不是它自身梅尔的一个跳长"
                              "（当前：{per_frame} 个采样，{out_rate} 赫兹；可用：{hop} 个采样，"
                              "{rate} 赫兹，且 `output_sampling_rate` 是 "
                              "`input_sampling_rate` 的整数倍）",
    "data.takes_no_reference": "`extra_inputs`：{model} 不接受参考视频（当前：{got!r}；可用：留空，"
                               "或它接受的输入）",
    "data.no_reference_video": "{where}：`in_context_videos`：没有参考视频（当前：无；可用："
                               "一个视频、帧文件夹或图像路径，或它们的列表）",
    "data.reference_not_found": "{where}：`in_context_videos`：找不到 {name}",
    "data.no_sample_condition": "`sample_images`：该模型从图像或参考视频生成（当前：此提示词"
                                "没有；可用：每个提示词一个）",
    "data.sample_images_missing":
        "`sample_images`：该模型从输入图像生成；第 {lines} 行没有给出图像（可用：每条提示词 1 到 "
        "{takes} 张图像，用 | 分隔，每行对应一条提示词；或完全不填 `sample_images`，从数据集的行中取）",
    "data.sample_images_over": "`sample_images`：第 {lines} 行给出的图像多于模型接受的数量"
                               "（可用：{allowed}）",
    "data.sample_images_at_most": "最多 {n} 张",
    "data.sample_images_none": "文生图模型不接受输入图像",
    "data.sample_images_too_many": "`sample_images`：行数多于 `sample_prompts`（当前：{n} 行对应 "
                                   "{prompts} 条提示词；可用：每条提示词一行）",
    "data.sample_image_not_found": "`sample_images`：第 {line} 行：找不到图像（当前：{got!r}；"
                                   "可用：图像文件）",
    "data.sample_first_frame_missing":
        "`sample_images`：图生视频模型从第一帧生成（当前：这条提示词没有图像；可用：每条提示词一张图像）",
    "data.sample_edit_images_missing":
        "`sample_images`：编辑模型从输入图像生成（当前：这条提示词没有图像；可用：每条提示词一到三张图像）",
    "data.cache_without_first_frame":
        "`dataset_base_path`：缓存的样本没有第一帧输入（当前：文生视频的缓存；可用：由 "
        "`sft:data_process` 为图生视频模型写入的缓存，`extra_inputs` 为 `input_image`）",
    "data.sample_videos_too_many": "`sample_videos`：行数多于 `sample_prompts`（当前：{n} "
                                   "行对应 {prompts} 条提示词；可用：每条提示词一行）",
    "data.sample_video_not_found": "`sample_videos`：第 {line} 行：找不到参考片段（当前："
                                   "{got!r}；可用：视频文件、帧文件夹或图像）",
    "data.sample_video_unusable": "`sample_videos`：第 {line} 行：{name} 不能作为帧数为 "
                                  "`sample_num_frames` {frames} 的样片的条件：{why}",
    "data.row_reference_unusable": "`sample_videos`：第 {line} 条提示词取 {where} 的参考视频 "
                                   "{name}，它不能作为帧数为 `sample_num_frames` {frames} "
                                   "的样片的条件：{why}（可用：那一行换成更长的片段，或在 "
                                   "`sample_videos` 中指定一个）",
    "data.no_sample_reference": "`sample_videos`：该模型从参考视频生成；第 {lines} 条提示词"
                                "没有参考视频，数据集的行也给不出（可用：每条提示词一个参考"
                                "片段，每行对应一条提示词）",
    "data.takes_no_sample_videos": "`sample_videos`：{model} 不接受参考视频（当前：{n} 行；"
                                   "可用：留空）",
    "data.sample_images_with_reference": "`sample_images`：{model} 的样片以参考视频为条件"
                                         "（当前：{n} 行；可用：留空，并在 `sample_videos` "
                                         "中写每条提示词的参考片段）",
    "data.sample_reference_caption": "第 {line} 条提示词：用 {where} 的参考视频（{name}），"
                                     "该行的描述就是这条提示词",
    "data.sample_reference_first_row": "第 {line} 条提示词：用第一行 {where} 的参考视频"
                                       "（{name}），没有哪一行的描述是这条提示词",
    "data.image_with_reference": "`extra_inputs`：`input_image` 与 `in_context_videos` 不能同时"
                                 "使用（当前：{got!r}；可用：二者之一，可带或不带 "
                                 "`input_audio`）",
    "data.bad_downsample_factor": "{where}：`in_context_downsample_factor`：不是能把视频尺寸"
                                  "整除为 {m} 的倍数的整数（当前：{got!r}；可用：例如 1 或 2）",
    "data.cache_without_condition": "`dataset_base_path`：有缓存样本没有"
                                    "{what:@data.noun}（当前：不含它的缓存；可用：用 "
                                    "`extra_inputs {inputs}` 运行 `sft:data_process` "
                                    "写入的缓存）",
    "data.cache_bad_sample": "缓存 {manifest}：有样本不是缓存文件夹中的文件（当前：{got!r}；"
                             "可用：形如 `<key>.safetensors` 的文件名）",
    "data.cache_bad_json": "缓存 {manifest}：不是有效的 `JSON`（{why:q}）；请重新运行 "
                           "`--task sft:data_process`",
    "data.cache_not_mapping": "缓存 {manifest}：不是映射（当前：`{got}`）",
    "data.cache_not_found": "`dataset_base_path`：找不到缓存文件夹（当前：{got!r}）；请先用 "
                            "`--output_path {folder}` 运行 `--task sft:data_process`",
    "data.cache_empty": "`dataset_base_path`：{folder} 中没有缓存样本；请先用 "
                        "`--output_path {folder}` 运行 `--task sft:data_process`",
    "data.cache_incomplete": "缓存 {folder} 不完整，缺少：{names}；请重新运行 "
                             "`--task sft:data_process`",
    "data.caption_no_folder": "`dataset_base_path`：找不到文件夹或无法读取（当前：{got!r}；"
                              "可用：已有的数据集文件夹）",
    "data.caption_no_meta": "`dataset_metadata_path`：`caption_target` 为 `metadata` 时写入"
                            "元数据文件的 `prompt` 列（当前：{got!r}；可用：已有的 .csv、.json "
                            "或 .jsonl 文件，或把 `caption_target` 设为 `txt`）",
    "data.caption_nothing_rows": "`dataset_base_path`：{meta} 的数据行中没有要标注的图像"
                                 "（当前：{got!r}；可用：含 {exts} 文件的文件夹）",
    "data.caption_nothing_folder": "`dataset_base_path`：文件夹中没有要标注的图像"
                                   "（当前：{got!r}；可用：含 {exts} 文件的文件夹）",
    "data.base_refused": "`dataset_base_path`：{why}",
    "data.caption_not_image": "`dataset_base_path`：{name} 无法作为图像打开（{why:q}）"
                              "（当前：{name!r}；可用：{exts} 图像文件）",
}
