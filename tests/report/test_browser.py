"""The reports in a real browser: headless Chromium (Debian ``chromium`` +
``chromium-driver``, installed by ``make system-deps``) driven by Selenium opens an
inspection report and a backfill report written by the real ``mmdwatch`` CLI, from
``file://`` as a person opens them. Every image loads, every link resolves (local files
exist, anchors name an element of the page), the console has no error, and a full-page
screenshot is saved under the test's tmp_path."""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import numpy as np
import pandas as pd
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

from monitor.demo.simulate import Scenario, simulate, write_csv
from tests.cli_runner import run_mmdwatch

ROOT = Path(__file__).resolve().parents[2]
CHANGE_AT = "2026-01-17T00:00:00Z"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _chromium() -> tuple[str, str]:
    """Paths of the browser and its driver; skip (with what to install) when absent."""
    browser = next((p for p in map(shutil.which, BROWSERS) if p), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip("no Chromium/ChromeDriver on this machine (found browser="
                    f"{browser}, chromedriver={driver}); `make system-deps` installs the "
                    "Debian packages chromium and chromium-driver")
    return browser, driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    binary, driver_path = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    # As root in a container Chromium needs --no-sandbox; the network flags keep it from
    # calling home (a closed network refuses those connections and logs errors).
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=driver_path,
                      log_output=str(tmp_path_factory.mktemp("chromedriver") / "log.txt"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def mmdwatch(*args: str) -> subprocess.CompletedProcess:
    out = run_mmdwatch(*args, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Three weeks of a simulated network (10-minute readings); s04 and s06 drop at
    CHANGE_AT. Returns the data file and a sensors file for the map."""
    folder = tmp_path_factory.mktemp("network")
    frame, truth = simulate(Scenario(n_sensors=10, days=21, change_at=CHANGE_AT,
                                     changes={"s04": -0.9, "s06": -0.9}))
    data = folder / "net.csv"
    write_csv(frame, data)
    rng = np.random.default_rng(0)
    sensors = folder / "sensors.csv"
    pd.DataFrame({"sensor_id": truth["sensors"], "x": rng.uniform(0, 100, 10),
                  "y": rng.uniform(0, 50, 10)}).to_csv(sensors, index=False)
    return data, sensors


def _only_folder(parent: Path) -> Path:
    (folder,) = [p for p in parent.iterdir() if p.is_dir()]
    return folder


def check_page(driver: Any, index: Path, screenshot: Path) -> dict[str, Any]:
    """Open ``index`` from file://, check images, links and console; save a screenshot."""
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(index.as_uri())
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script(
            "return document.readyState === 'complete' && "
            "Array.from(document.images).every(i => i.complete)"))

    images = driver.execute_script(
        "return Array.from(document.images).map(i => ({src: i.getAttribute('src'), "
        "url: i.currentSrc || i.src, width: i.naturalWidth, height: i.naturalHeight}))")
    assert images, f"{index} shows no image"
    broken = [i["src"] for i in images if not i["width"] > 0]
    assert not broken, f"images that did not load in Chromium: {broken}"
    for image in images:
        assert urlsplit(image["url"]).scheme == "file", f"remote image {image['url']}"

    links = driver.execute_script(
        "return Array.from(document.querySelectorAll('a[href]')).map(a => "
        "({href: a.getAttribute('href'), url: a.href}))")
    assert links, f"{index} links nothing"
    for link in links:
        if link["href"].startswith("#"):
            target = unquote(link["href"][1:])
            assert driver.execute_script("return document.getElementById(arguments[0]) "
                                         "!== null", target), f"anchor {link['href']} names no id"
            continue
        url = urlsplit(link["url"])
        assert url.scheme == "file", f"link leaves the report: {link['href']} -> {link['url']}"
        path = Path(url2pathname(url.path))
        assert path.is_file(), f"link {link['href']!r} points at missing {path}"
        assert index.parent in path.parents, f"link {link['href']!r} leaves the folder"
        if url.fragment and path == index:
            assert driver.execute_script("return document.getElementById(arguments[0]) "
                                         "!== null", unquote(url.fragment))

    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, f"console errors in {index}: {errors}"

    # The whole page in one PNG (DevTools: the content size as the clip, beyond the viewport).
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    data = screenshot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    return {"images": images, "links": links}


@pytest.mark.slow
def test_inspection_report_in_chromium(browser: Any, network: tuple[Path, Path],
                                       tmp_path: Path) -> None:
    data, sensors = network
    out = mmdwatch("inspect", "--data", str(data), "--at", CHANGE_AT, "--profile",
                   "retrospective", "--sensors-file", str(sensors), "--report",
                   str(tmp_path / "reports"))
    assert json.loads(out.stdout)["status"] == "firing"
    folder = _only_folder(tmp_path / "reports")
    seen = check_page(browser, folder / "index.html", tmp_path / "inspection.png")
    files = {Path(i["src"]).name for i in seen["images"]}
    assert {"scores.png", "lambda_heatmap.png", "network_map.png"} <= files
    assert sum(f.startswith("profile_") for f in files) == 3
    assert {"result.json", "report.json"} <= {link["href"] for link in seen["links"]}
    # The caption names the engine's rule: the default gap rule, not a histogram bin.
    caption = browser.execute_script(
        "return document.querySelector('img[src=\"scores.png\"]')"
        ".closest('figure').querySelector('figcaption').textContent")
    assert "gap selection rule" in caption and "empty bin" not in caption
    assert (tmp_path / "inspection.png").stat().st_size > 0


@pytest.mark.slow
def test_backfill_report_in_chromium(browser: Any, network: tuple[Path, Path],
                                     tmp_path: Path) -> None:
    data, _ = network
    mmdwatch("backfill", "--data", str(data), "--start", "2026-01-16T00:00:00", "--end",
             "2026-01-17T18:00:00", "--every", "6h", "--method", "mmd-baseline",
             # the data start 11 days before: 3.4 days of calibration history at the start
             "--min-history", "2d",
             "--out", str(tmp_path / "results.jsonl"), "--report", str(tmp_path / "reports"))
    folder = _only_folder(tmp_path / "reports")
    seen = check_page(browser, folder / "index.html", tmp_path / "backfill.png")
    assert {Path(i["src"]).name for i in seen["images"]} == {"score_timeline.png",
                                                             "p_value_timeline.png"}
    assert {"results.jsonl", "report.json"} <= {link["href"] for link in seen["links"]}
    text = browser.find_element("tag name", "body").text
    results = [json.loads(line) for line in
               (tmp_path / "results.jsonl").read_text().splitlines() if line.strip()]
    firing = sum(r["status"] == "firing" for r in results)
    assert len(results) == 8 and firing >= 1  # the change at CHANGE_AT fires
    assert f"8 inspections: {firing} firing" in text  # the page counts what the file holds
    assert (tmp_path / "backfill.png").stat().st_size > 0


@pytest.mark.parametrize(("body", "complaint"), [
    ('<img src="missing.png" alt="x">', "did not load"),
    ('<img src="ok.png" alt="x"><a href="nowhere.json">x</a>', "points at missing"),
    ('<img src="ok.png" alt="x"><a href="#no-such-id">x</a>', "names no id"),
    ('<img src="ok.png" alt="x"><a href="ok.png">x</a><script>console.error("boom")</script>',
     "console errors"),
])
def test_the_checks_catch_a_broken_page(browser: Any, tmp_path: Path, body: str,
                                        complaint: str) -> None:
    """The checker is not vacuous: each kind of defect in a page fails it."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 1))
    fig.add_subplot().plot([0, 1])
    fig.savefig(tmp_path / "ok.png")
    index = tmp_path / "index.html"
    index.write_text(f"<!DOCTYPE html><html><head><title>t</title></head><body>{body}"
                     "</body></html>")
    with pytest.raises(AssertionError, match=complaint):
        check_page(browser, index, tmp_path / "shot.png")


def test_no_chromium_is_a_skip_that_says_what_to_install(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setenv("PATH", os.devnull)
    with pytest.raises(pytest.skip.Exception, match="make system-deps"):
        _chromium()
