"""dsmlkit's image token counts equal vLLM 0.34's own DeepSeek-V4.1 image preprocessing.

vLLM's ``DeepseekV4VLImageProcessor`` (``vllm/models/deepseek_v41/common/mm_preprocess.py``)
is run on an image of each size of the unit tests' table, and its grid counted with its
own ``num_image_tokens``; the fixture images' sizes are checked against Pillow, which vLLM
opens images with. Needs vLLM 0.34 (``.ci/engines`` runs it in that venv); skipped where it
is not installed.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

pytest.importorskip("vllm")
mm_preprocess = pytest.importorskip("vllm.models.deepseek_v41.common.mm_preprocess")

# vLLM's own serving and preprocessing code (it may run processes, as platform checks do).
pytestmark = pytest.mark.slow

from PIL import Image, ImageOps  # noqa: E402  (installed with vLLM)
from vllm.transformers_utils.configs.deepseek_v41 import DeepseekV41Config  # noqa: E402

from dsmlkit.dialects import V41_VISION, Vision  # noqa: E402
from dsmlkit.render.images import ImageHeader, ImageSize, image_tokens  # noqa: E402
from tests.images import png  # noqa: E402
from tests.test_render_images import (  # noqa: E402
    IMAGES,
    NARROWED,
    NARROWED_TOKENS,
    V41_TOKENS,
)


def vllm_tokens(width: int, height: int, vision_config: dict[str, Any] | None = None) -> int:
    """The tokens vLLM's V4.1 processor gives an image of that size."""
    processor = mm_preprocess.DeepseekV4VLImageProcessor(
        DeepseekV41Config(vision_config=vision_config)
    )
    *_, rows, columns = processor(Image.new("RGB", (width, height)))
    tokens: int = mm_preprocess.num_image_tokens(rows, columns)
    return tokens


def test_the_vision_settings_are_vllms_defaults() -> None:
    config = DeepseekV41Config()
    assert (
        Vision(
            patch_size=config.vision_patch_size,
            downsample_ratio=config.vision_downsample_ratio,
            max_tokens=config.vision_max_n_token,
            min_pixels=config.vision_min_pixels,
            max_wh_ratio=config.vision_max_wh_ratio,
        )
        == V41_VISION
    )


@pytest.mark.parametrize(("size", "tokens"), V41_TOKENS.items(), ids=str)
def test_the_table_is_vllms(size: tuple[int, int], tokens: int) -> None:
    assert vllm_tokens(*size) == tokens == image_tokens(ImageSize(*size), V41_VISION)


@pytest.mark.parametrize(("size", "tokens"), NARROWED_TOKENS.items(), ids=str)
def test_a_narrowing_checkpoints_table_is_vllms(size: tuple[int, int], tokens: int) -> None:
    settings = {"max_wh_ratio": NARROWED.max_wh_ratio, "max_image_tokens": NARROWED.max_tokens}
    assert vllm_tokens(*size, settings) == tokens == image_tokens(ImageSize(*size), NARROWED)


@pytest.mark.parametrize("size", [(2, 700), (333, 1), (1343, 1345), (2000, 41), (613, 4099)])
def test_odd_sizes_count_as_vllm_counts_them(size: tuple[int, int]) -> None:
    assert image_tokens(ImageSize(*size), V41_VISION) == vllm_tokens(*size)


def test_the_fixture_sizes_are_what_pillow_shows() -> None:
    sizes = json.loads((IMAGES / "sizes.json").read_text())
    for name, size in sizes.items():
        image = ImageOps.exif_transpose(Image.open(IMAGES / name))
        assert list(image.size) == size, name
        assert ImageHeader((IMAGES / name).read_bytes()).size() == ImageSize(*size), name


def test_pillow_reads_the_tests_pngs_at_their_size() -> None:
    for size in [(1, 1), (16, 16), (1024, 1024), (3000, 200)]:
        assert Image.open(io.BytesIO(png(*size))).size == size
