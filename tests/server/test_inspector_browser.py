"""The inspector page in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``) driven by Selenium against a real ``dsmlkit serve`` process.

Skipped where no browser is installed, unless ``DSMLKIT_REQUIRE_BROWSER=1`` (``.ci/run``
installs both and sets it, so there a missing browser fails instead of skipping).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.images import data_url, png
from tests.server.process import serve_process

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
VECTORS = {
    vector["id"]: vector
    for vector in json.loads(
        (Path(__file__).parents[1] / "data" / "parse.json").read_text("utf-8")
    )["vectors"]
}

_missing = [
    name
    for name, found in (
        ("chromium", CHROMIUM),
        ("chromedriver", CHROMEDRIVER),
    )
    if not found
]
if _missing and os.environ.get("DSMLKIT_REQUIRE_BROWSER") == "1":
    raise RuntimeError(f"DSMLKIT_REQUIRE_BROWSER=1 but {', '.join(_missing)} is not installed")
# A real dsmlkit serve process and a headless Chromium.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(_missing), reason=f"no {', '.join(_missing)} here"),
]


@pytest.fixture(scope="module")
def server_url(v41_tokenizer: str) -> Iterator[str]:
    """With a V4.1 tokenizer file: prompts go upstream as token ids."""
    with serve_process("--tokenizer", v41_tokenizer) as (_, url):
        yield url


@pytest.fixture(scope="module")
def text_server_url() -> Iterator[str]:
    """With the bundled V4 tokenizer, which lacks V4.1's ``<｜System｜>``: prompts go as text."""
    with serve_process() as (_, url):
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,2000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_script_timeout(10)
    yield driver
    driver.quit()


def _open(browser: WebDriver, url: str) -> None:
    browser.get(url + "/ui")
    WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "parse").is_enabled())


def _type(browser: WebDriver, element_id: str, text: str) -> None:
    # Set the value directly: send_keys cannot type every character (fullwidth bars, newlines
    # are fine, but it is slow for long text and some drivers mangle astral characters).
    field = browser.find_element(By.ID, element_id)
    browser.execute_script("arguments[0].value = arguments[1];", field, text)


def _parse(browser: WebDriver, text: str, *, dialect: str = "", chunk: str = "") -> None:
    _type(browser, "source", text)
    Select(browser.find_element(By.ID, "dialect")).select_by_value(dialect)
    _type(browser, "chunk-size", chunk)
    browser.execute_script("document.getElementById('parse-result').hidden = true;")
    browser.find_element(By.ID, "parse").click()
    WebDriverWait(browser, 10).until(
        lambda b: (
            b.find_element(By.ID, "parse-result").is_displayed()
            or b.find_element(By.ID, "parse-error").is_displayed()
        )
    )
    assert not browser.find_element(By.ID, "parse-error").is_displayed()


def _texts(browser: WebDriver, selector: str) -> list[str]:
    return [
        str(node.get_attribute("textContent"))
        for node in browser.find_elements(By.CSS_SELECTOR, selector)
    ]


def test_a_closer_inside_a_value_shows_one_call(browser: WebDriver, server_url: str) -> None:
    vector = VECTORS["v41-param-close-inside-value"]
    _open(browser, server_url)
    _parse(browser, vector["text"], dialect="v4.1")
    (expected,) = vector["expected"]["calls"]
    assert browser.find_element(By.ID, "call-count").text == "1"
    assert _texts(browser, "#calls .call-name") == [expected["name"]]
    (shown,) = _texts(browser, "#calls .call-arguments")
    assert json.loads(shown) == expected["arguments"]
    assert browser.find_element(By.ID, "content").get_attribute("textContent") == ""
    # The value, closing-tag text and all, is highlighted as one argument value of call 1;
    # the highlighted source is the source, whole.
    values = _texts(browser, "#highlighted .value[data-call='0']")
    assert values == [str(value) for value in expected["arguments"].values()]
    assert any("</｜DSML｜ parameter>" in value for value in values)
    assert browser.find_element(By.ID, "highlighted").get_attribute("textContent") == vector["text"]
    markup = "".join(_texts(browser, "#highlighted .markup"))
    assert "<｜DSML｜ invoke" in markup
    assert "</｜DSML｜ calls>" in markup


def test_leaked_ascii_markup_becomes_a_call_not_content(
    browser: WebDriver, server_url: str
) -> None:
    vector = VECTORS["v4-ascii-legacy-wrapped"]
    _open(browser, server_url)
    _parse(browser, vector["text"], dialect="v4")
    content = str(browser.find_element(By.ID, "content").get_attribute("textContent"))
    assert content == vector["expected"]["content"]
    assert "DSML" not in content
    assert browser.find_element(By.ID, "call-count").text == str(len(vector["expected"]["calls"]))
    assert _texts(browser, "#calls .call-name") == [c["name"] for c in vector["expected"]["calls"]]
    assert content in _texts(browser, "#highlighted .content")
    assert any("<|DSML|" in text for text in _texts(browser, "#highlighted .markup"))


def test_chunked_replay_lists_the_events_in_order(browser: WebDriver, server_url: str) -> None:
    vector = VECTORS["v41-thinking-text-parallel"]
    _open(browser, server_url)
    browser.find_element(By.ID, "thinking").click()
    try:
        _parse(browser, vector["text"], dialect="v4.1", chunk="4")
    finally:
        browser.find_element(By.ID, "thinking").click()
    rows = browser.find_elements(By.CSS_SELECTOR, "#events tbody tr")
    deltas = [int(str(row.get_attribute("data-delta"))) for row in rows]
    assert deltas == sorted(deltas)
    assert deltas[-1] == -(-len(vector["text"]) // 4)  # the close() row comes last
    types = [row.get_attribute("data-type") for row in rows if row.get_attribute("data-type")]
    assert types[0] == "reasoning"
    assert types[-1] == "output_end"
    assert types.count("tool_call_start") == types.count("tool_call_end") == 2
    assert types.index("reasoning_end") < types.index("tool_call_start")
    assert browser.find_element(By.ID, "event-count").text == str(len(types))
    browser.find_element(By.ID, "replay").click()
    assert browser.find_elements(By.CSS_SELECTOR, "#events tr.pending")
    WebDriverWait(browser, 20).until(
        lambda b: not b.find_elements(By.CSS_SELECTOR, "#events tr.pending")
    )


RENDER_REQUEST = {
    "model": "deepseek-v4.1",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is <｜User｜> in a prompt?"},
    ],
}


def _render(
    browser: WebDriver, url: str, request: Mapping[str, object] = RENDER_REQUEST
) -> dict[str, object]:
    expected: dict[str, object] = httpx.post(
        url + "/v1/chat/completions/render", json=request
    ).json()
    _open(browser, url)
    Select(browser.find_element(By.ID, "api")).select_by_value("chat")
    _type(browser, "request", json.dumps(request))
    browser.find_element(By.ID, "render").click()
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "render-result").is_displayed()
    )
    prompt = expected["prompt"]
    assert browser.find_element(By.ID, "prompt").get_attribute("textContent") == prompt
    return expected


def test_render_shows_the_prompt_specials_and_token_count(
    browser: WebDriver, server_url: str
) -> None:
    expected = _render(browser, server_url)
    token_ids, prompt, spans = expected["token_ids"], expected["prompt"], expected["special_spans"]
    assert isinstance(token_ids, list) and isinstance(prompt, str) and isinstance(spans, list)
    assert browser.find_element(By.ID, "token-count").text == str(len(token_ids))
    assert browser.find_element(By.ID, "token-note").text == ""
    specials = _texts(browser, "#prompt .special")
    assert specials == [prompt[a:b] for a, b in spans]
    assert "<｜System｜>" in specials
    assert specials.count("<｜User｜>") == 1  # the one the user typed is text, not a token


def test_render_counts_an_images_span_by_its_size(browser: WebDriver, v41_tokenizer: str) -> None:
    image = {"type": "image_url", "image_url": {"url": data_url(png(1024, 1024))}}
    content = [{"type": "text", "text": "Look:"}, image]
    request = {"model": "m", "messages": [{"role": "user", "content": content}]}
    # a tokenizer with V4.1's image placeholder: the prompt goes as ids
    with serve_process("--tokenizer", v41_tokenizer) as (_, url):
        expected = _render(browser, url, request)
        shown = browser.find_element(By.ID, "token-count").text
        note = browser.find_element(By.ID, "token-note").text
    token_ids = expected["token_ids"]
    assert isinstance(token_ids, list)
    # the placeholder becomes V4.1's 652 tokens for a 1024x1024 image
    assert expected["prompt_tokens"] == len(token_ids) - 1 + 652
    assert shown == str(len(token_ids) - 1 + 652)
    assert "652 of them for 1 image(s)" in note


def test_render_counts_a_text_prompt_with_the_tokenizer(
    browser: WebDriver, text_server_url: str
) -> None:
    expected = _render(browser, text_server_url)
    assert expected["token_ids"] is None
    counted = httpx.post(
        text_server_url + "/tokenize",
        json={"prompt": expected["prompt"], "add_special_tokens": False},
    ).json()
    assert browser.find_element(By.ID, "token-count").text == str(counted["count"])
    assert "counted from the prompt text" in browser.find_element(By.ID, "token-note").text
    notes = _texts(browser, "#render-notes li")
    assert notes == expected["notes"]
    assert notes


def test_a_bad_request_shows_the_servers_message(browser: WebDriver, server_url: str) -> None:
    _open(browser, server_url)
    Select(browser.find_element(By.ID, "api")).select_by_value("messages")
    _type(browser, "request", '{"model": "m", "messages": []}')
    browser.find_element(By.ID, "render").click()
    error = browser.find_element(By.ID, "render-error")
    WebDriverWait(browser, 10).until(lambda b: error.is_displayed())
    assert error.text.startswith("400: ")
