"""Regenerate docs/dashboard.png: the dashboard of a demo server, as an administrator sees it.

    .venv/bin/python scripts/dashboard_screenshot.py [OUTPUT.png]

Starts ``dpcurator serve --demo`` (the shipped Adult sample, epsilon 1, a temporary
ledger), adds two analysts through the administrators' route, lets them ask a few
questions through the Python client (one of them refused), then signs in as the demo's
administrator in headless Chromium (Debian's /usr/bin/chromium, driven by Playwright),
picks age x education for the heat map and writes a screenshot of the top of the page.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import httpx
from playwright.sync_api import expect, sync_playwright

from dpcurator.client import Client
from dpcurator.errors import BudgetExceeded

ROOT = Path(__file__).resolve().parents[1]
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "dashboard.png"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpcurator.cli", "serve", "--demo", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        token = url = None
        for line in proc.stdout:
            if "analyst token" in line:
                token = line.split()[-1]
            if line.startswith("listening on "):
                url = line.split()[-1]
                break
        assert token and url, "the demo server did not start"
        admin = {"Authorization": f"Bearer {token}"}
        tokens = {}
        for name, quota in (("alice", 0.5), ("bob", None)):
            r = httpx.post(
                f"{url}/v1/admin/analysts", headers=admin, json={"name": name, "quota": quota}
            )
            r.raise_for_status()
            tokens[name] = r.json()["token"]
        with Client(url, tokens["alice"]) as alice, Client(url, tokens["bob"]) as bob:
            alice.count("age < 30 AND education = 'Bachelors'", epsilon=0.2)
            alice.histogram("age", [17, 30, 45, 60, 91], epsilon=0.1)
            bob.marginal(["sex", "race"], epsilon=0.15)
            bob.count("education IN ('Masters', 'Doctorate') AND age >= 40", epsilon=0.3)
            alice.count("age BETWEEN 60 AND 90", epsilon=0.2)
            with contextlib.suppress(BudgetExceeded):
                alice.count("age < 25", epsilon=0.3)  # over her quota: refused
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(url + "/dashboard")
            page.get_by_label("Token").fill(token)
            page.get_by_role("button", name="Show the dashboard").click()
            expect(page.locator("#status")).to_contain_text("Updated")
            page.select_option("#heat-rows", "age")
            page.select_option("#heat-cols", "education")
            page.get_by_role("button", name="Show").click()
            expect(page.locator("#heat-summary")).to_contain_text("age by education")
            page.mouse.move(0, 0)
            page.evaluate("window.scrollTo(0, 0)")  # bounding boxes are in the viewport
            bottom = page.locator("#heat-help").bounding_box()
            assert bottom is not None
            page.screenshot(
                path=str(out),
                full_page=True,
                clip={"x": 0, "y": 0, "width": 1200, "height": bottom["y"] + bottom["height"] + 8},
            )
            browser.close()
        print(f"wrote {out}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
