"""A headless Chromium for the console's browser test and benchmark (Debian's chromium and
chromium-driver, installed by `make browser`), driven by selenium."""
from __future__ import annotations

import os
import shutil
from typing import Any

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
DRIVER_PATHS = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")


def find_browser() -> tuple[str, str] | str:
    """(chromium, chromedriver) paths, or why there is none (a sentence to print)."""
    chromium = next((p for p in CHROMIUM_PATHS if os.access(p, os.X_OK)), None) or shutil.which("chromium")
    driver = next((p for p in DRIVER_PATHS if os.access(p, os.X_OK)), None) or shutil.which("chromedriver")
    if chromium is None or driver is None:
        return "chromium or chromium-driver is not installed (`make browser` installs Debian's)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (`make install` installs the test dependencies)"
    return chromium, driver


def headless_chromium(width: int = 1400, height: int = 1000) -> Any:
    """A started selenium WebDriver on a headless Chromium; the caller quits it."""
    found = find_browser()
    if isinstance(found, str):
        raise RuntimeError(found)
    chromium, driver = found
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(driver))
