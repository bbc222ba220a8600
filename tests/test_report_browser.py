"""A run's and a sweep's report opened in a real headless browser (Debian's Chromium, driven by
Playwright; no browser is downloaded): it renders every figure with no console error and no request
beyond the file itself, a legend click hides a policy, the sweep's menu switches the metric, and a
screenshot of each is saved (to $SYNCSIM_SCREENSHOTS when set, else the test's temporary folder)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.report_folders import run_folder, sweep_folder

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is a test extra: pip install -e '.[test]'")
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (Debian: apt-get install chromium)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("SYNCSIM_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def opened(browser: Any, report: Path) -> tuple[Any, list[str], list[str]]:
    """The page with `report` loaded and rendered; the console's errors and every URL it requested."""
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(report.as_uri())
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length > 0")
    return page, errors, requests


def visible(page: Any, figure: int) -> list[Any]:
    return page.evaluate(f"document.querySelectorAll('.js-plotly-plot')[{figure}].data.map(t => t.visible)")


def test_a_run_report_renders_offline_and_a_legend_click_hides_a_policy(browser: Any, tmp_path: Path) -> None:
    report = run_folder(tmp_path) / "report.html"
    page, errors, requests = opened(browser, report)
    plots = page.locator(".js-plotly-plot")
    assert plots.count() == 4 and page.locator(".js-plotly-plot .main-svg").count() >= 4
    page.screenshot(path=str(screenshots(tmp_path) / "report_run.png"), full_page=True)
    before = visible(page, 1)  # iteration times: a line per policy
    plots.nth(1).locator(".legendtoggle").first.click()
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot')[1].data[0].visible === 'legendonly'")
    after = visible(page, 1)
    assert before[0] in (None, True) and after[0] == "legendonly" and after[1:] == before[1:]
    assert errors == [] and requests == [report.as_uri()]


def test_a_sweep_report_renders_offline_and_its_menu_switches_the_metric(browser: Any, tmp_path: Path) -> None:
    report = sweep_folder(tmp_path) / "report.html"
    page, errors, requests = opened(browser, report)
    page.screenshot(path=str(screenshots(tmp_path) / "report_sweep.png"), full_page=True)
    before = visible(page, 0)
    page.locator(".updatemenu-header-group").first.click()
    page.locator(".updatemenu-dropdown-button").nth(1).click()
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot')[0].data[0].visible === false")
    after = visible(page, 0)
    shown = [i for i, v in enumerate(after) if v is True]
    assert shown and shown != [i for i, v in enumerate(before) if v is True]
    title = page.evaluate("document.querySelectorAll('.js-plotly-plot')[0].layout.yaxis.title.text")
    assert title != "Throughput (samples/s)"
    assert errors == [] and requests == [report.as_uri()]
