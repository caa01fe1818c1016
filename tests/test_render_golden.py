"""Every golden prompt renders byte for byte with the options its meta file names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsmlkit.render import render

GOLDEN = Path(__file__).parent / "data" / "golden"
FRONTEND_CRATES = GOLDEN / "v4.1" / "frontend_crates_deepseek_v41.json"


def _cases() -> list[Any]:
    cases = []
    for dialect in ("v3.2", "v4", "v4.1"):
        for meta_path in sorted((GOLDEN / dialect).glob("*.meta.json")):
            name = meta_path.name.removesuffix(".meta.json")
            if (GOLDEN / dialect / f"{name}.input.json").exists():
                cases.append(pytest.param(dialect, name, id=f"{dialect}/{name}"))
    return cases


def _options(dialect: str, meta: dict[str, Any]) -> dict[str, Any]:
    """Translate the reference ``encode_messages`` options of a meta file into ours."""
    encode = meta["encode_options"]
    options: dict[str, Any] = {
        "dialect": dialect,
        "mode": encode["thinking_mode"],
        "reasoning_effort": encode.get("reasoning_effort"),
        "drop_thinking": encode["drop_thinking"],
        "add_bos": encode["add_default_bos_token"],
        "add_generation_prompt": encode.get("add_generation_prompt", True),
    }
    if dialect == "v4.1":
        early_drop = meta["source_repo"] == "sgl-project/sglang"
        options["effort_table"] = (
            "preview" if early_drop or encode.get("effective_budget") == 50 else "release"
        )
    return options


@pytest.mark.parametrize(("dialect", "name"), _cases())
def test_golden_case_renders_byte_for_byte(dialect: str, name: str) -> None:
    folder = GOLDEN / dialect
    meta = json.loads((folder / f"{name}.meta.json").read_text(encoding="utf-8"))
    data = json.loads((folder / f"{name}.input.json").read_text(encoding="utf-8"))
    if isinstance(data, list):
        data = {"messages": data}
    expected = (folder / f"{name}.expected.txt").read_bytes().decode("utf-8")
    if "strip()" in meta["encode_options"].get("compare", ""):
        expected = expected.strip()

    result = render(data["messages"], data.get("tools"), **_options(dialect, meta))

    assert result.prompt == expected
    assert "".join(text for text, _ in result.pieces) == result.prompt


def _frontend_cases() -> list[Any]:
    cases = json.loads(FRONTEND_CRATES.read_text(encoding="utf-8"))
    return [pytest.param(case, id=case["name"]) for case in cases]


@pytest.mark.parametrize("case", _frontend_cases())
def test_frontend_crates_v41_case_renders_byte_for_byte(case: dict[str, Any]) -> None:
    result = render(
        case["messages"],
        dialect="v4.1",
        mode="thinking" if case["thinking"] else "chat",
        reasoning_effort=case["effort"],
        drop_thinking=case["drop_thinking"],
    )
    assert result.prompt == case["expected"]


@pytest.mark.parametrize(("table", "budget"), [(None, 75), ("release", 75), ("preview", 50)])
def test_v41_default_effort_follows_the_table(table: str | None, budget: int) -> None:
    result = render([{"role": "user", "content": "Hi"}], dialect="v4.1", effort_table=table)
    assert result.prompt.startswith(
        f"<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: {budget} (range 1-100"
    )
