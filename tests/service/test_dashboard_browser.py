"""The dashboard in a real browser: headless Chromium (Debian's) driven by Playwright,
against a real ``dpcurator serve`` process. Each test writes a screenshot of each page
it sees into its temporary folder."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from dpcurator.client import Client
from dpcurator.errors import BudgetExceeded

from .conftest import FAST, Server, running

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect
if not shutil.which(CHROMIUM) and not os.environ.get("CI"):
    pytest.skip(f"no {CHROMIUM} (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Budget epsilon 1; root (an administrator), alice (quota 0.6) and bob, who have
    each been answered a little already."""
    with running(tmp_path_factory.mktemp("dash"), budget=("--epsilon", "1"), config=FAST) as s:
        s.add("root", "--admin")
        s.add("alice", "--quota", "0.6")
        s.add("bob")
        with s.client("alice") as a, s.client("bob") as b:
            a.count("age < 30 AND sex = 'F'", epsilon=0.1)
            a.histogram("age", [0, 25, 50, 75, 100], epsilon=0.1)
            b.marginal(["region", "score"], epsilon=0.2)
            b.count("region = 'north'", epsilon=0.1)
        yield s


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, server: Server) -> Iterator[object]:
    """A fresh browser context (its own session storage) that records every request."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    pg = context.new_page()
    pg.requested = []  # type: ignore[attr-defined]
    pg.errors = []  # type: ignore[attr-defined]
    pg.on("request", lambda r: pg.requested.append(r.url))
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.set_default_timeout(20_000)
    yield pg
    assert not pg.errors, pg.errors  # no JavaScript error on any page
    for url in pg.requested:  # nothing fetched from anywhere but the server
        assert url.startswith(server.url) or url.startswith("data:"), url
    context.close()


def sign_in(pg, server: Server, who: str | None, token: str | None = None) -> None:
    pg.goto(server.url + "/dashboard")
    pg.get_by_label("Token").fill(token if token is not None else server.tokens[who])
    pg.get_by_role("button", name="Show the dashboard").click()


def loaded(pg) -> None:
    # (the page's Content-Security-Policy forbids eval, so no wait_for_function)
    expect(pg.locator("#status")).to_have_text(re.compile(r"^Updated "))
    pg.wait_for_selector("#heat-map svg")


def shot(pg, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    pg.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    return path


def cell_info(pg, row: int, col: int) -> str:
    """The text the heat map reads out for one cell, reached with the keyboard."""
    pg.focus("#heat-map")
    pg.keyboard.press("ArrowRight")
    pg.keyboard.press("ArrowLeft")
    for _ in range(20):
        pg.keyboard.press("ArrowUp")
        pg.keyboard.press("Home")
    for _ in range(row):
        pg.keyboard.press("ArrowDown")
    for _ in range(col):
        pg.keyboard.press("ArrowRight")
    return pg.inner_text("#heat-info")


def test_an_administrator_sees_spend_heat_map_changes_and_refusals(page, server, tmp_path) -> None:
    pg = page
    sign_in(pg, server, "root")
    loaded(pg)
    assert pg.evaluate("sessionStorage.getItem('dpcurator-token')") == server.tokens["root"]
    assert pg.evaluate("localStorage.length") == 0
    assert pg.input_value("#token") == ""  # not left in the form
    assert "root (administrator)" in pg.inner_text("#who-name")
    # the spend chart: one line per analyst who was charged, and the budget
    chart = pg.locator("#spend-chart svg")
    assert chart.locator("polyline").count() == 2
    legend = pg.inner_html("#spend-chart")
    assert "alice" in legend and "bob" in legend and "budget 1" in legend
    analysts = pg.inner_text("#analysts")
    for name in ("root", "alice", "bob"):
        assert name in analysts
    shot(pg, tmp_path, "admin-overview")

    # pick two attributes; read a cell with the keyboard
    pg.select_option("#heat-rows", "age")
    pg.select_option("#heat-cols", "region")
    pg.fill("#heat-row-bins", "0,25,50,75,100")
    pg.get_by_role("button", name="Show").click()
    expect(pg.locator("#heat-summary")).to_have_text(re.compile(r"^age by region"))
    before = pg.inner_html("#heat-map")
    info = cell_info(pg, 0, 2)  # age 0-24, region east
    assert info.startswith("age = 0–24, region = east: 0.6 epsilon left"), info
    shot(pg, tmp_path, "admin-heatmap")

    # a query answered through the client changes the map
    with server.client("alice") as a:
        a.count("age < 25 AND region = 'east'", epsilon=0.3)
        with pytest.raises(BudgetExceeded, match="quota"):
            a.count("age < 25", epsilon=0.2)  # within the budget, over alice's quota
    pg.get_by_role("button", name="Refresh").click()
    loaded(pg)
    expect(pg.locator("#heat-summary")).to_contain_text("least left on a cell is 0.3")
    assert pg.inner_html("#heat-map") != before
    assert cell_info(pg, 0, 2).startswith("age = 0–24, region = east: 0.3 epsilon left")
    assert cell_info(pg, 0, 0).startswith("age = 0–24, region = north: 0.5 epsilon left")
    # the refusal appears, with what was left
    refusals = pg.inner_text("#refusals")
    assert "'age < 25'" in refusals and "alice" in refusals and "quota" in refusals
    answers = pg.inner_text("#answers")
    assert "age < 25 AND region = 'east'" in answers and "marginal(region, score)" in answers
    assert pg.locator("#panels figure").count() >= 3
    # the figures as a table, for screen readers and keyboards
    pg.locator("#heat-details summary").click()
    expect(pg.locator("#heat-table-values th[scope=row]")).to_have_count(4)
    shot(pg, tmp_path, "admin-after-query")

    # an estimate, through /v1/estimate
    pg.select_option("#est-kind", "histogram")
    pg.fill("#est-attribute", "age")
    pg.fill("#est-bins", "0,50,100")
    pg.fill("#est-cost", "0.1")
    pg.get_by_role("button", name="Estimate").click()
    expect(pg.locator("#estimate")).to_contain_text("Admitted now")
    text = pg.inner_text("#estimate")
    assert "discrete_laplace" in text and "yes" in text
    shot(pg, tmp_path, "admin-estimate")


def test_an_analyst_sees_only_herself(page, server, tmp_path) -> None:
    pg = page
    sign_in(pg, server, "alice")
    loaded(pg)
    assert "alice (analyst)" in pg.inner_text("#who-name")
    body = pg.inner_text("main")
    assert "bob" not in body and "root" not in body
    assert "marginal(region, score)" not in body  # bob's request
    summary = pg.inner_text("#budget-summary")
    assert "Your quota" in summary and "Privacy unit" in summary and "per row" in summary
    assert pg.locator("#spend-chart svg polyline").count() == 1
    assert "bob" not in pg.inner_html("#spend-chart")
    assert pg.locator("#analysts tbody tr").count() == 1
    assert pg.inner_text("#answers-title") == "Your answers"
    assert "histogram(age" in pg.inner_text("#answers")
    # her figures on a cell are those of /v1/budget for her: the smaller of the two
    pg.select_option("#heat-rows", "sex")
    pg.select_option("#heat-cols", "region")
    pg.get_by_role("button", name="Show").click()
    expect(pg.locator("#heat-summary")).to_have_text(re.compile(r"^sex by region"))
    assert "your quota" in pg.inner_text("#heat-summary")
    assert "of your quota" in cell_info(pg, 0, 0)
    shot(pg, tmp_path, "analyst")
    # another analyst's records are refused, not shown
    status = pg.evaluate(
        """async () => (await fetch('/v1/dashboard/answers?analyst=bob', {headers:
           {Authorization: 'Bearer ' + sessionStorage.getItem('dpcurator-token')}})).status"""
    )
    assert status == 403
    pg.get_by_role("button", name="Sign out").click()
    assert pg.evaluate("sessionStorage.getItem('dpcurator-token')") is None
    assert pg.locator("main").is_hidden()


def test_a_wrong_token_sees_nothing(page, server, tmp_path) -> None:
    pg = page
    sign_in(pg, server, None, token="dpc_0123456789abcdef_" + "A" * 43)
    expect(pg.locator("#status")).to_contain_text("not accepted")
    assert pg.locator("main").is_hidden()
    assert pg.locator("#login").is_visible()
    assert pg.evaluate("sessionStorage.getItem('dpcurator-token')") is None
    assert pg.inner_text("#analysts") == "" and pg.inner_text("#answers") == ""
    assert pg.locator("svg").count() == 0
    shot(pg, tmp_path, "wrong-token")
    with Client(server.url, server.tokens["root"]) as c:  # the server is fine
        assert c.remaining() > 0
