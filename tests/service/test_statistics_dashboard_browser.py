"""Statistics on the dashboard, in a real browser (headless Chromium against a real
``dpcurator serve``): answers with groups, quantiles and intervals, and the estimate form
for a median, with no JavaScript error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import FAST, Server, running
from .test_dashboard_browser import ARGS, CHROMIUM, expect, loaded, shot, sign_in, sync_api


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(tmp_path_factory.mktemp("stat"), budget=("--epsilon", "2"), config=FAST) as s:
        s.add("root", "--admin")
        with s.client("root") as c:
            c.mean("age", 0, 99, by="sex", epsilon=0.5)
            c.quantiles("score", [0.25, 0.75], where="age < 50", epsilon=0.5)
        yield s


def test_statistics_read_well(server: Server, tmp_path: Path) -> None:
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1200, "height": 900})
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.set_default_timeout(20_000)
        sign_in(pg, server, "root")
        loaded(pg)
        answers = pg.inner_text("#answers")
        assert "mean(age, 0, 99, by=sex)" in answers and "sex = 'F': " in answers
        assert "quantiles(score, [0.25, 0.75], where=age < 50)" in answers
        assert "all rows, q = 0.25 (rank within" in answers
        pg.select_option("#est-kind", "median")
        pg.fill("#est-attribute", "age")
        pg.fill("#est-by", "sex")
        pg.fill("#est-cost", "0.1")
        pg.get_by_role("button", name="Estimate").click()
        expect(pg.locator("#estimate")).to_contain_text("Admitted now")
        text = pg.inner_text("#estimate")
        assert "permute_and_flip" in text and "95% rank error" in text and "rows" in text
        shot(pg, tmp_path, "statistics")
        browser.close()
        assert not errors, errors
